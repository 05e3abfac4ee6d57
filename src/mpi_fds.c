/* SPDX-License-Identifier: MIT */
/* mpi_fds.c: file descriptors between the ranks of one node.
 *
 * A CUDA pool made to be shared is imported from a POSIX file descriptor
 * (cuMemPoolExportToShareableHandle), and only a Unix socket can carry a
 * descriptor from one process to another (SCM_RIGHTS). Each rank binds a
 * datagram socket in the abstract namespace, named by its pid (which every
 * rank learns at start), so nothing is left in the file system. A sender
 * queues a descriptor in the receiver's socket, tagged with its rank and a
 * token, before it sends the MPI message that names the token: the
 * receiver finds it already there. Nothing here blocks; descriptors that
 * arrive before they are asked for wait in a list. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <lauxlib.h>

#include "mpi_fds.h"

typedef struct Tag {
  int32_t rank;                 /* the sender's world rank */
  int64_t token;                /* what the sender's message names */
} Tag;

typedef struct Arrived {
  struct Arrived *next;
  Tag tag;
  int fd;
} Arrived;

static int sock = -1;
static int bind_errno;          /* why sock is -1 */
static int *pids;               /* pids[r]: world rank r's process */
static int nranks, my_rank;
static Arrived *arrived;

static socklen_t address_of(int pid, struct sockaddr_un *a)
{
  memset(a, 0, sizeof *a);
  a->sun_family = AF_UNIX;
  int n = snprintf(a->sun_path + 1, sizeof a->sun_path - 1, "cudalua-mpi-%d", pid);
  return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

int mpi_fds_start(MPI_Comm comm, int rank, int size)
{
  int me = (int)getpid();
  pids = calloc((size_t)size, sizeof *pids);
  if (pids == NULL)
    return MPI_ERR_NO_MEM;
  nranks = size;
  my_rank = rank;
  int rc = MPI_Allgather(&me, 1, MPI_INT, pids, 1, MPI_INT, comm);
  if (rc != MPI_SUCCESS)
    return rc;
  struct sockaddr_un a;
  socklen_t len = address_of(me, &a);
  sock = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (sock >= 0 && bind(sock, (struct sockaddr *)&a, len) != 0) {
    bind_errno = errno;
    close(sock);
    sock = -1;
  } else if (sock < 0)
    bind_errno = errno;
  return MPI_SUCCESS;
}

/* The file descriptor argument at i. */
static int check_fd(lua_State *L, int i)
{
  lua_Integer fd = luaL_checkinteger(L, i);
  luaL_argcheck(L, fd >= 0 && fd <= INT32_MAX, i, "not a file descriptor");
  return (int)fd;
}

/* fds.send(fd, dest, token) -> true | nil, why: a copy of fd queued at
 * world rank dest's socket (the caller keeps fd). */
int mpi_fds_send(lua_State *L)
{
  int fd = check_fd(L, 1);
  lua_Integer dest = luaL_checkinteger(L, 2);
  Tag tag = {my_rank, (int64_t)luaL_checkinteger(L, 3)};
  luaL_argcheck(L, pids != NULL && dest >= 0 && dest < nranks, 2, "not a rank of this job");
  if (sock < 0) {
    lua_pushnil(L);
    lua_pushfstring(L, "this rank has no descriptor socket: %s", strerror(bind_errno));
    return 2;
  }
  struct sockaddr_un a;
  socklen_t len = address_of(pids[dest], &a);
  struct iovec iov = {&tag, sizeof tag};
  union { struct cmsghdr h; char room[CMSG_SPACE(sizeof(int))]; } control;
  memset(&control, 0, sizeof control);
  struct msghdr m = {&a, len, &iov, 1, control.room, sizeof control.room, 0};
  struct cmsghdr *c = CMSG_FIRSTHDR(&m);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(c), &fd, sizeof fd);
  if (sendmsg(sock, &m, MSG_DONTWAIT | MSG_NOSIGNAL) != (ssize_t)sizeof tag) {
    lua_pushnil(L);
    lua_pushfstring(L, "sending a descriptor to rank %d: %s", (int)dest, strerror(errno));
    return 2;
  }
  lua_pushboolean(L, 1);
  return 1;
}

/* Move every descriptor waiting in the socket to the list. */
static void drain(void)
{
  for (;;) {
    Tag tag;
    struct iovec iov = {&tag, sizeof tag};
    union { struct cmsghdr h; char room[CMSG_SPACE(sizeof(int))]; } control;
    struct msghdr m = {NULL, 0, &iov, 1, control.room, sizeof control.room, 0};
    ssize_t n = recvmsg(sock, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return;
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    int fd = -1;
    if (c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS && c->cmsg_len == CMSG_LEN(sizeof(int)))
      memcpy(&fd, CMSG_DATA(c), sizeof fd);
    Arrived *a = fd >= 0 && n == (ssize_t)sizeof tag ? malloc(sizeof *a) : NULL;
    if (a == NULL) {            /* malformed, or no memory: dropped */
      if (fd >= 0)
        close(fd);
      continue;
    }
    *a = (Arrived){arrived, tag, fd};
    arrived = a;
  }
}

/* fds.receive(src, token) -> fd | nil: the descriptor world rank src sent
 * with token, now this rank's to close (fds.close). */
int mpi_fds_receive(lua_State *L)
{
  lua_Integer src = luaL_checkinteger(L, 1);
  lua_Integer token = luaL_checkinteger(L, 2);
  if (sock >= 0)
    drain();
  for (Arrived **a = &arrived; *a; a = &(*a)->next)
    if ((*a)->tag.rank == src && (*a)->tag.token == token) {
      Arrived *found = *a;
      *a = found->next;
      lua_pushinteger(L, found->fd);
      free(found);
      return 1;
    }
  lua_pushnil(L);
  return 1;
}

/* fds.close(fd) */
int mpi_fds_close(lua_State *L)
{
  close(check_fd(L, 1));
  return 0;
}
