/* SPDX-License-Identifier: MIT */
/* graph.c: graphs, captured (stream.c) or built node by node, and their
 * executables.
 *
 * A graph is its list of work items in the order the nodes were added, a
 * valid topological order since a node's dependencies exist before it; a
 * node's handle is its item's id, unique in the process. A child graph node
 * owns a copy of its child; a conditional node owns its body graphs.
 * Instantiation flattens both into the executable's list, so a launch
 * replays one list in order.
 *
 * Conditionals: the emulated kernels cannot set a condition, so its value
 * is the handle's default (0 without CU_GRAPH_COND_ASSIGN_DEFAULT) at every
 * launch. An `if` runs its first body when that is nonzero, its second
 * (if any) when zero; a `while` runs nothing when it is zero and fails to
 * instantiate (CUDA_ERROR_NOT_SUPPORTED) when it is not, since nothing
 * could end the loop. `switch` nodes are not supported. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake.h"

#define GRAPH_MAGIC 0x47524150u
#define COND_HANDLE_TAG (1ull << 32)   /* handle = tag | value */

struct CUgraphExec_st {
  struct CUgraph_st g;
  int auto_free;                /* CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH (graphmem.c) */
};

static unsigned long long last_node;

static int graph_valid(CUgraph g) { return g && g->magic == GRAPH_MAGIC; }

static CUgraphNode node_handle(unsigned long long id) { return (CUgraphNode)(uintptr_t)id; }

/* Append w as it is, keeping its node id. */
static CUresult graph_push(CUgraph g, const struct fake_Work *w)
{
  if (g->n == g->cap) {
    size_t cap = g->cap ? 2 * g->cap : 8;
    struct fake_Work *more = realloc(g->work, cap * sizeof *more);
    if (!more)
      return CUDA_ERROR_OUT_OF_MEMORY;
    g->work = more;
    g->cap = cap;
  }
  g->work[g->n++] = *w;
  return CUDA_SUCCESS;
}

/* Append w as a new node. */
CUresult fake_graph_append(CUgraph g, const struct fake_Work *w)
{
  struct fake_Work item = *w;
  item.node = ++last_node;
  return graph_push(g, &item);
}

static struct CUgraph_st *graphs;   /* every graph graph_alloc made and graph_release did not free */

static struct CUgraph_st *graph_alloc(void)
{
  struct CUgraph_st *g = calloc(1, sizeof *g);
  if (g) {
    g->magic = GRAPH_MAGIC;
    g->next = graphs;
    graphs = g;
  }
  return g;
}

static void graph_unlist(CUgraph g)
{
  for (struct CUgraph_st **p = &graphs; *p; p = &(*p)->next)
    if (*p == g) {
      *p = g->next;
      return;
    }
}

static void graph_release(CUgraph g);

/* Free the graphs an item owns. */
static void item_release(struct fake_Work *w)
{
  if (w->kind == WORK_CHILD)
    graph_release(w->u.child.graph);
  else if (w->kind == WORK_COND) {
    for (unsigned k = 0; k < w->u.cond.size; k++)
      graph_release(w->u.cond.bodies[k]);
    free(w->u.cond.bodies);
  }
}

/* Free a graph and the graphs its nodes own (not counted: they are part of it). */
static void graph_release(CUgraph g)
{
  for (size_t i = 0; g && i < g->n; i++)
    item_release(&g->work[i]);
  if (g) {
    graph_unlist(g);
    g->magic = 0;
    free(g->work);
    free(g);
  }
}

CUresult fake_graph_new(CUgraph *g)
{
  *g = graph_alloc();
  if (!*g)
    return CUDA_ERROR_OUT_OF_MEMORY;
  fake_keep(*g);
  fake_live[FAKE_GRAPH]++;
  return CUDA_SUCCESS;
}

void fake_graph_destroy(CUgraph g)
{
  fake_unkeep(g);
  fake_live[FAKE_GRAPH]--;
  graph_release(g);
}

static CUgraph graph_clone(CUgraph g);

/* Give w its own copies of the graphs it owns; 0 when out of memory. */
static int item_clone(struct fake_Work *w)
{
  if (w->kind == WORK_CHILD)
    return (w->u.child.graph = graph_clone(w->u.child.graph)) != NULL;
  if (w->kind != WORK_COND)
    return 1;
  CUgraph *bodies = w->u.cond.bodies;
  unsigned size = w->u.cond.size;
  w->u.cond.size = 0;
  w->u.cond.bodies = calloc(size, sizeof *bodies);
  for (unsigned k = 0; w->u.cond.bodies && k < size; k++)
    if ((w->u.cond.bodies[k] = graph_clone(bodies[k])) != NULL)
      w->u.cond.size = k + 1;
  if (w->u.cond.size == size)
    return 1;
  item_release(w);
  return 0;
}

/* A deep copy of g with new node ids, for a child graph node. */
static CUgraph graph_clone(CUgraph g)
{
  CUgraph copy = graph_alloc();
  for (size_t i = 0; copy && i < g->n; i++) {
    struct fake_Work w = g->work[i];
    if (!item_clone(&w))
      goto fail;
    if (fake_graph_append(copy, &w) != CUDA_SUCCESS) {
      item_release(&w);
      goto fail;
    }
  }
  return copy;
fail:
  graph_release(copy);
  return NULL;
}

/* --- building -------------------------------------------------------------- */

static int has_node(CUgraph g, CUgraphNode node)
{
  for (size_t i = 0; i < g->n; i++)
    if (node_handle(g->work[i].node) == node)
      return 1;
  return 0;
}

/* Add w to g after deps, which must be nodes of g; *node gets its handle. */
static CUresult add_node(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t ndeps,
                         const struct fake_Work *w)
{
  if (!node || !graph_valid(g) || (ndeps && !deps))
    return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < ndeps; i++)
    if (!has_node(g, deps[i]))
      return CUDA_ERROR_INVALID_VALUE;
  CUresult r = fake_graph_append(g, w);
  if (r == CUDA_SUCCESS)
    *node = node_handle(g->work[g->n - 1].node);
  return r;
}

CUresult fake_cuGraphCreate(CUgraph *g, unsigned int flags)
{
  FAKE_ENTER(cuGraphCreate);
  if (!g || flags != 0)
    return CUDA_ERROR_INVALID_VALUE;
  return fake_graph_new(g);
}

static CUresult kernel_node_item(struct fake_Work *w, const CUDA_KERNEL_NODE_PARAMS *p)
{
  if (!p)
    return CUDA_ERROR_INVALID_VALUE;
  if (p->extra || !p->func)
    return CUDA_ERROR_NOT_SUPPORTED;
  const unsigned grid[3] = {p->gridDimX, p->gridDimY, p->gridDimZ};
  const unsigned block[3] = {p->blockDimX, p->blockDimY, p->blockDimZ};
  return fake_kernel_item(w, p->func, grid, block, p->sharedMemBytes, p->kernelParams);
}

CUresult fake_cuGraphAddKernelNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps,
                                   size_t ndeps, const CUDA_KERNEL_NODE_PARAMS *p)
{
  FAKE_ENTER(cuGraphAddKernelNode);
  struct fake_Work w;
  CUresult r = kernel_node_item(&w, p);
  return r != CUDA_SUCCESS ? r : add_node(node, g, deps, ndeps, &w);
}

/* One end of a copy: only whole, one-dimensional buffers (as cudalua builds them). */
static CUdeviceptr copy_end(CUmemorytype type, CUdeviceptr device, const void *host)
{
  return type == CU_MEMORYTYPE_HOST ? (CUdeviceptr)(uintptr_t)host : device;
}

CUresult fake_cuGraphAddMemcpyNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps,
                                   size_t ndeps, const CUDA_MEMCPY3D *c, CUcontext ctx)
{
  FAKE_ENTER(cuGraphAddMemcpyNode);
  (void)ctx;
  if (!c)
    return CUDA_ERROR_INVALID_VALUE;
  if (c->Height > 1 || c->Depth > 1 || c->srcXInBytes || c->dstXInBytes || c->srcY || c->dstY ||
      c->srcZ || c->dstZ || c->srcMemoryType == CU_MEMORYTYPE_ARRAY ||
      c->dstMemoryType == CU_MEMORYTYPE_ARRAY)
    return CUDA_ERROR_NOT_SUPPORTED;
  struct fake_Work w;
  fake_memcpy_item(&w, copy_end(c->dstMemoryType, c->dstDevice, c->dstHost),
                   copy_end(c->srcMemoryType, c->srcDevice, c->srcHost), c->WidthInBytes);
  return add_node(node, g, deps, ndeps, &w);
}

CUresult fake_cuGraphAddMemsetNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps,
                                   size_t ndeps, const CUDA_MEMSET_NODE_PARAMS *p, CUcontext ctx)
{
  FAKE_ENTER(cuGraphAddMemsetNode);
  (void)ctx;
  if (!p)
    return CUDA_ERROR_INVALID_VALUE;
  if (p->height > 1)
    return CUDA_ERROR_NOT_SUPPORTED;
  struct fake_Work w;
  CUresult r = fake_memset_item(&w, p->dst, p->value, p->elementSize, p->width);
  return r != CUDA_SUCCESS ? r : add_node(node, g, deps, ndeps, &w);
}

CUresult fake_cuGraphAddEmptyNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps,
                                  size_t ndeps)
{
  FAKE_ENTER(cuGraphAddEmptyNode);
  struct fake_Work w = {.kind = WORK_NOP};
  return add_node(node, g, deps, ndeps, &w);
}

/* An event node: a record stamps the event; work runs in order, so a
 * wait is always satisfied and its node is a no-op. */
static CUresult event_node(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t ndeps,
                           CUevent ev, enum fake_WorkKind kind)
{
  if (!fake_event_valid(ev))
    return CUDA_ERROR_INVALID_HANDLE;
  struct fake_Work w = {.kind = kind};
  w.u.event.ev = ev;
  return add_node(node, g, deps, ndeps, &w);
}

CUresult fake_cuGraphAddEventRecordNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps,
                                        size_t ndeps, CUevent ev)
{
  FAKE_ENTER(cuGraphAddEventRecordNode);
  return event_node(node, g, deps, ndeps, ev, WORK_EVENT);
}

CUresult fake_cuGraphAddEventWaitNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps,
                                      size_t ndeps, CUevent ev)
{
  FAKE_ENTER(cuGraphAddEventWaitNode);
  return event_node(node, g, deps, ndeps, ev, WORK_NOP);
}

CUresult fake_cuGraphAddChildGraphNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps,
                                       size_t ndeps, CUgraph child)
{
  FAKE_ENTER(cuGraphAddChildGraphNode);
  if (!graph_valid(child) || child == g)
    return CUDA_ERROR_INVALID_VALUE;
  struct fake_Work w = {.kind = WORK_CHILD};
  w.u.child.graph = graph_clone(child);
  if (!w.u.child.graph)
    return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult r = add_node(node, g, deps, ndeps, &w);
  if (r != CUDA_SUCCESS)
    item_release(&w);
  return r;
}

CUresult fake_cuGraphConditionalHandleCreate(CUgraphConditionalHandle *h, CUgraph g,
                                             CUcontext ctx, unsigned int def, unsigned int flags)
{
  FAKE_ENTER(cuGraphConditionalHandleCreate);
  (void)ctx;
  if (!h || !graph_valid(g) || (flags & ~(unsigned)CU_GRAPH_COND_ASSIGN_DEFAULT))
    return CUDA_ERROR_INVALID_VALUE;
  *h = COND_HANDLE_TAG | (flags & CU_GRAPH_COND_ASSIGN_DEFAULT ? def : 0);
  return CUDA_SUCCESS;
}

static CUresult conditional_item(struct fake_Work *w, CUDA_CONDITIONAL_NODE_PARAMS *p)
{
  if ((p->handle & ~0xffffffffull) != COND_HANDLE_TAG || p->size < 1 ||
      p->size > (p->type == CU_GRAPH_COND_TYPE_IF ? 2u : 1u))
    return CUDA_ERROR_INVALID_VALUE;
  if (p->type != CU_GRAPH_COND_TYPE_IF && p->type != CU_GRAPH_COND_TYPE_WHILE)
    return CUDA_ERROR_NOT_SUPPORTED;
  *w = (struct fake_Work){.kind = WORK_COND};
  w->u.cond.bodies = calloc(p->size, sizeof *w->u.cond.bodies);
  for (unsigned k = 0; w->u.cond.bodies && k < p->size; k++)
    if ((w->u.cond.bodies[k] = graph_alloc()) != NULL)
      w->u.cond.size = k + 1;
  w->u.cond.type = p->type;
  w->u.cond.value = p->handle & 0xffffffffull;
  if (w->u.cond.size < p->size) {
    item_release(w);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  p->phGraph_out = w->u.cond.bodies;
  return CUDA_SUCCESS;
}

/* Only conditional nodes: cudalua adds every other kind with its own call. */
CUresult fake_cuGraphAddNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps,
                             const CUgraphEdgeData *edges, size_t ndeps, CUgraphNodeParams *p)
{
  FAKE_ENTER(cuGraphAddNode);
  (void)edges;
  if (!p)
    return CUDA_ERROR_INVALID_VALUE;
  if (p->type != CU_GRAPH_NODE_TYPE_CONDITIONAL)
    return CUDA_ERROR_NOT_SUPPORTED;
  struct fake_Work w;
  CUresult r = conditional_item(&w, &p->conditional);
  if (r == CUDA_SUCCESS && (r = add_node(node, g, deps, ndeps, &w)) != CUDA_SUCCESS)
    item_release(&w);
  return r;
}

/* --- executables ----------------------------------------------------------- */

/* Append g's work to exec, child graphs and taken conditional bodies inline. */
static CUresult flatten(CUgraph exec, CUgraph g)
{
  CUresult r = CUDA_SUCCESS;
  for (size_t i = 0; r == CUDA_SUCCESS && i < g->n; i++) {
    const struct fake_Work *w = &g->work[i];
    if (w->kind == WORK_CHILD)
      r = flatten(exec, w->u.child.graph);
    else if (w->kind == WORK_COND && w->u.cond.type == CU_GRAPH_COND_TYPE_WHILE)
      r = w->u.cond.value ? CUDA_ERROR_NOT_SUPPORTED : CUDA_SUCCESS;
    else if (w->kind == WORK_COND && (w->u.cond.value || w->u.cond.size == 2))
      r = flatten(exec, w->u.cond.bodies[w->u.cond.value ? 0 : 1]);
    else if (w->kind != WORK_COND)
      r = graph_push(exec, w);
  }
  return r;
}

CUresult fake_cuGraphInstantiateWithFlags(CUgraphExec *exec, CUgraph g, unsigned long long flags)
{
  FAKE_ENTER(cuGraphInstantiateWithFlags);
  if (!exec || !graph_valid(g))
    return CUDA_ERROR_INVALID_VALUE;
  *exec = calloc(1, sizeof **exec);
  if (!*exec)
    return CUDA_ERROR_OUT_OF_MEMORY;
  (*exec)->g.magic = GRAPH_MAGIC;
  (*exec)->auto_free = (flags & CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH) != 0;
  CUresult r = flatten(&(*exec)->g, g);
  if (r != CUDA_SUCCESS) {
    free((*exec)->g.work);
    free(*exec);
    return r;
  }
  fake_keep(*exec);
  fake_live[FAKE_GRAPH]++;
  return CUDA_SUCCESS;
}

static int exec_valid(CUgraphExec exec) { return exec && exec->g.magic == GRAPH_MAGIC; }

/* Whether a copy or fill node reaches virtual memory a GPU would fault on
 * (unmapped, freed, or mapped without write access): checked when the
 * graph runs, as the fake checks a copy or fill issued on its own, since
 * built nodes take any address and memory may be unmapped after. */
static int work_faults(const struct fake_Work *w)
{
  if (w->kind == WORK_MEMSET)
    return fake_vmm_faults((uintptr_t)w->u.memset.dst, w->u.memset.count * w->u.memset.elem, 1);
  if (w->kind == WORK_MEMCPY)
    return fake_vmm_faults((uintptr_t)w->u.memcpy.dst, w->u.memcpy.n, 1) ||
           fake_vmm_faults((uintptr_t)w->u.memcpy.src, w->u.memcpy.n, 0);
  return 0;
}

CUresult fake_cuGraphLaunch(CUgraphExec exec, CUstream s)
{
  FAKE_ENTER(cuGraphLaunch);
  if (!exec_valid(exec) || !fake_stream_valid(s))
    return CUDA_ERROR_INVALID_HANDLE;
  for (size_t i = 0; i < exec->g.n && !fake_stream_capturing(s); i++)
    if (work_faults(&exec->g.work[i]))
      return CUDA_ERROR_ILLEGAL_ADDRESS;   /* before any of it runs: the host would crash */
  CUresult m = fake_graph_mem_launch(&exec->g, exec->auto_free);
  if (m != CUDA_SUCCESS)
    return m;
  for (size_t i = 0; i < exec->g.n; i++) {
    CUresult r = fake_submit(s, &exec->g.work[i]);
    if (r != CUDA_SUCCESS)
      return r;
  }
  return CUDA_SUCCESS;
}

/* Nothing to upload: the work runs on the host. */
CUresult fake_cuGraphUpload(CUgraphExec exec, CUstream s)
{
  FAKE_ENTER(cuGraphUpload);
  return exec_valid(exec) && fake_stream_valid(s) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

/* New parameters for a kernel node of the graph exec was instantiated from. */
CUresult fake_cuGraphExecKernelNodeSetParams(CUgraphExec exec, CUgraphNode node,
                                             const CUDA_KERNEL_NODE_PARAMS *p)
{
  FAKE_ENTER(cuGraphExecKernelNodeSetParams);
  if (!exec_valid(exec))
    return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < exec->g.n; i++) {
    struct fake_Work *w = &exec->g.work[i];
    if (node_handle(w->node) == node && w->kind == WORK_KERNEL) {
      struct fake_Work item;
      CUresult r = kernel_node_item(&item, p);
      if (r == CUDA_SUCCESS) {
        item.node = w->node;
        *w = item;
      }
      return r;
    }
  }
  return CUDA_ERROR_INVALID_VALUE;
}

/* How the graph g differs from the executable's (both flattened): paired
 * item by item in order, as the driver pairs nodes by the order they were
 * added; the reason a real driver gives for the first difference. */
static CUgraphExecUpdateResult update_check(CUgraphExec exec, CUgraph g,
                                            CUgraphExecUpdateResultInfo *info)
{
  size_t common = exec->g.n < g->n ? exec->g.n : g->n;
  for (size_t i = 0; i < common; i++) {
    const struct fake_Work *from = &exec->g.work[i], *to = &g->work[i];
    int memory = to->kind == WORK_MEMALLOC || to->kind == WORK_MEMFREE;
    CUgraphExecUpdateResult why = from->kind != to->kind ? CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED
                                  /* a memory node's allocation is fixed at instantiation */
                                  : memory && from->u.gmem.a != to->u.gmem.a
                                  ? CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED
                                  : CU_GRAPH_EXEC_UPDATE_SUCCESS;
    if (why != CU_GRAPH_EXEC_UPDATE_SUCCESS) {
      info->errorNode = node_handle(to->node);
      info->errorFromNode = node_handle(from->node);
      return why;
    }
  }
  if (exec->g.n == g->n)
    return CU_GRAPH_EXEC_UPDATE_SUCCESS;
  if (common < g->n)          /* the first node that has no partner */
    info->errorNode = node_handle(g->work[common].node);
  return CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
}

/* The executable runs g's parameters from now on; its nodes keep their
 * handles (cuGraphExecKernelNodeSetParams still takes the original's). */
CUresult fake_cuGraphExecUpdate(CUgraphExec exec, CUgraph g, CUgraphExecUpdateResultInfo *info)
{
  FAKE_ENTER(cuGraphExecUpdate);
  if (!exec_valid(exec) || !graph_valid(g) || !info)
    return CUDA_ERROR_INVALID_VALUE;
  memset(info, 0, sizeof *info);
  struct CUgraph_st flat = {.magic = GRAPH_MAGIC};
  CUresult r = flatten(&flat, g);
  if (r == CUDA_SUCCESS && (info->result = update_check(exec, &flat, info)) != 0)
    r = CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
  for (size_t i = 0; r == CUDA_SUCCESS && i < flat.n; i++) {
    flat.work[i].node = exec->g.work[i].node;
    exec->g.work[i] = flat.work[i];
  }
  if (r != CUDA_SUCCESS && info->result == CU_GRAPH_EXEC_UPDATE_SUCCESS)
    info->result = CU_GRAPH_EXEC_UPDATE_ERROR;
  free(flat.work);
  return r;
}

CUresult fake_cuGraphExecDestroy(CUgraphExec exec)
{
  FAKE_ENTER(cuGraphExecDestroy);
  fake_host_wait();              /* as a free may: cudalua must not rely on a destroy not waiting */
  fake_capture_unsafe();
  if (!exec_valid(exec))
    return CUDA_ERROR_INVALID_VALUE;
  fake_unkeep(exec);
  fake_live[FAKE_GRAPH]--;
  exec->g.magic = 0;
  free(exec->g.work);
  free(exec);
  return CUDA_SUCCESS;
}

CUresult fake_cuGraphDestroy(CUgraph g)
{
  FAKE_ENTER(cuGraphDestroy);
  fake_host_wait();              /* as a free may: cudalua must not rely on a destroy not waiting */
  fake_capture_unsafe();
  if (!graph_valid(g))
    return CUDA_ERROR_INVALID_VALUE;
  fake_graph_destroy(g);
  return CUDA_SUCCESS;
}

CUresult fake_cuGraphGetNodes(CUgraph g, CUgraphNode *nodes, size_t *count)
{
  FAKE_ENTER(cuGraphGetNodes);
  if (!graph_valid(g) || !count)
    return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; nodes && i < *count && i < g->n; i++)
    nodes[i] = node_handle(g->work[i].node);
  *count = g->n;
  return CUDA_SUCCESS;
}

/* --- copies and pictures --------------------------------------------------- */

/* Whether g (or a graph its nodes own) holds a node cuGraphClone refuses:
 * memory allocations and frees, and conditional nodes (cuda.h). */
static int clone_refused(CUgraph g)
{
  for (size_t i = 0; i < g->n; i++) {
    const struct fake_Work *w = &g->work[i];
    if (w->kind == WORK_MEMALLOC || w->kind == WORK_MEMFREE || w->kind == WORK_COND ||
        (w->kind == WORK_CHILD && clone_refused(w->u.child.graph)))
      return 1;
  }
  return 0;
}

CUresult fake_cuGraphClone(CUgraph *clone, CUgraph g)
{
  FAKE_ENTER(cuGraphClone);
  if (!clone || !graph_valid(g))
    return CUDA_ERROR_INVALID_VALUE;
  if (clone_refused(g))
    return CUDA_ERROR_NOT_SUPPORTED;
  *clone = graph_clone(g);
  if (!*clone)
    return CUDA_ERROR_OUT_OF_MEMORY;
  fake_keep(*clone);
  fake_live[FAKE_GRAPH]++;
  return CUDA_SUCCESS;
}

static const char *const work_names[] = {
  [WORK_KERNEL] = "KERNEL", [WORK_MEMCPY] = "MEMCPY", [WORK_MEMSET] = "MEMSET",
  [WORK_EVENT] = "EVENT_RECORD", [WORK_NOP] = "EMPTY", [WORK_HOST] = "HOST",
  [WORK_CHILD] = "GRAPH", [WORK_COND] = "CONDITIONAL", [WORK_MEMALLOC] = "MEM_ALLOC",
  [WORK_MEMFREE] = "MEM_FREE"
};

/* One DOT statement a node, in the order they were added; a child graph as
 * a cluster of its own nodes. The fake keeps no edges: its order is one. */
static void dot_nodes(FILE *f, CUgraph g, int depth)
{
  for (size_t i = 0; i < g->n; i++) {
    const struct fake_Work *w = &g->work[i];
    int wait = w->kind == WORK_NOP && w->u.event.ev;   /* an event wait node */
    fprintf(f, "%*snode%llu [label=\"%s", 2 * depth, "", w->node,
            wait ? "WAIT_EVENT" : work_names[w->kind]);
    if (w->kind == WORK_KERNEL)
      fprintf(f, "\\n%s", fake_function_name(w->u.kernel.fn));
    fprintf(f, "\"];\n");
    if (w->kind == WORK_CHILD) {
      fprintf(f, "%*ssubgraph cluster_%llu {\n", 2 * depth, "", w->node);
      dot_nodes(f, w->u.child.graph, depth + 1);
      fprintf(f, "%*s}\n", 2 * depth, "");
    }
  }
}

CUresult fake_cuGraphDebugDotPrint(CUgraph g, const char *path, unsigned int flags)
{
  FAKE_ENTER(cuGraphDebugDotPrint);
  (void)flags;
  if (!graph_valid(g) || !path)
    return CUDA_ERROR_INVALID_VALUE;
  FILE *f = fopen(path, "w");
  if (!f)
    return CUDA_ERROR_OPERATING_SYSTEM;
  fprintf(f, "digraph fakecuda {\n");
  dot_nodes(f, g, 1);
  fprintf(f, "}\n");
  return fclose(f) == 0 ? CUDA_SUCCESS : CUDA_ERROR_OPERATING_SYSTEM;
}

/* A node's item, found among the live graphs by its handle; NULL for none. */
static const struct fake_Work *find_node(CUgraphNode node)
{
  for (CUgraph g = graphs; g; g = g->next)
    for (size_t i = 0; i < g->n; i++)
      if (node_handle(g->work[i].node) == node)
        return &g->work[i];
  return NULL;
}

/* The graph a child graph node owns (not a copy: it goes with the node). */
CUresult fake_cuGraphChildGraphNodeGetGraph(CUgraphNode node, CUgraph *graph)
{
  FAKE_ENTER(cuGraphChildGraphNodeGetGraph);
  const struct fake_Work *w = find_node(node);
  if (!graph || !w || w->kind != WORK_CHILD)
    return CUDA_ERROR_INVALID_VALUE;
  *graph = w->u.child.graph;
  return CUDA_SUCCESS;
}

/* A node's type. An event wait node is a no-op that names its event, an
 * empty node one that does not. */
CUresult fake_cuGraphNodeGetType(CUgraphNode node, CUgraphNodeType *type)
{
  FAKE_ENTER(cuGraphNodeGetType);
  static const CUgraphNodeType types[] = {
    [WORK_KERNEL] = CU_GRAPH_NODE_TYPE_KERNEL, [WORK_MEMCPY] = CU_GRAPH_NODE_TYPE_MEMCPY,
    [WORK_MEMSET] = CU_GRAPH_NODE_TYPE_MEMSET, [WORK_EVENT] = CU_GRAPH_NODE_TYPE_EVENT_RECORD,
    [WORK_NOP] = CU_GRAPH_NODE_TYPE_EMPTY, [WORK_HOST] = CU_GRAPH_NODE_TYPE_HOST,
    [WORK_CHILD] = CU_GRAPH_NODE_TYPE_GRAPH, [WORK_COND] = CU_GRAPH_NODE_TYPE_CONDITIONAL,
    [WORK_MEMALLOC] = CU_GRAPH_NODE_TYPE_MEM_ALLOC, [WORK_MEMFREE] = CU_GRAPH_NODE_TYPE_MEM_FREE
  };
  const struct fake_Work *w = find_node(node);
  if (!type || !w)
    return CUDA_ERROR_INVALID_VALUE;
  *type = w->kind == WORK_NOP && w->u.event.ev ? CU_GRAPH_NODE_TYPE_WAIT_EVENT : types[w->kind];
  return CUDA_SUCCESS;
}
