/* SPDX-License-Identifier: MIT */
/* view_math.c: the host views' bulk arithmetic and reductions.
 *
 * These methods of cuda.View run on the host, over a view whose elements
 * the host can read as one contiguous run (view_check_host): device views
 * and strided views raise a clear error instead.
 *
 * Semantics, in one place (the API reference repeats them):
 * - Elements are 1-based. v[i] = x converts x with cl_dtype_store: checked,
 *   never wraps (300 into a uint8 is an error).
 * - Scalar operands of bulk ops are converted to the element type first, with
 *   the same checks, then the op runs in the element type: float32 math is
 *   float32 math (add(0.1) adds the float32 nearest 0.1).
 * - Integer arithmetic wraps modulo 2^bits, as C unsigned and CUDA integer
 *   arithmetic do. Integer division truncates toward zero (C, not Lua's //);
 *   dividing by zero is an error; INT_MIN / -1 wraps to INT_MIN, and so does
 *   abs(INT_MIN). Integer sqrt is the exact floor(sqrt(x)); a negative
 *   element is an error. Errors are found before anything is written,
 *   except a zero divisor that an overlapping div wrote itself (see
 *   integer_div_view): it is found when the loop reaches it.
 * - Float division by zero follows IEEE 754 (inf or NaN), no error.
 * - Binary ops need views of the same dtype and length; copy converts
 *   between dtypes. An operand may overlap its target (v:mul(v), or two
 *   ranges of one buffer): elements are then processed first to last, as a
 *   C loop would (copy alone behaves like memmove).
 * - sum: floats add in double with Neumaier compensation; integers add
 *   exactly (128-bit) and return an integer, or a float when the exact sum
 *   does not fit in int64. min/max return NaN when any element is NaN.
 *
 * The bulk kernels are generated per element type by the macros below, one
 * counted loop each, so that the compiler vectorizes them (this file is
 * built with -ftree-vectorize); the dtype is dispatched once per call
 * through the `ops` table, never inside a loop. Binary kernels take no
 * restrict pointers: v:mul(v) (an operand aliasing its target) is legal, and
 * the vectorizer checks for overlap at run time. */
#include <math.h>
#include <string.h>

#include "view.h"

#ifndef __SIZEOF_INT128__
#error "view_math.c needs a compiler with __int128 (exact integer sums)"
#endif

typedef __int128 int128;


/* --- the generator --------------------------------------------------------
 * v:random(lo, hi, seed) is deterministic across machines: xoshiro256**
 * (Blackman and Vigna), its 256-bit state seeded with four successive outputs
 * of splitmix64 started at the seed (taken as an unsigned 64-bit integer).
 * One 64-bit draw x per attempt:
 * - floats: u = (x >> 11) * 2^-53 in [0, 1); value = lo + (hi - lo) * u,
 *   computed in double and rounded to the element type, drawn again when the
 *   rounding reaches hi. For float32, lo and hi are rounded to float32 first.
 * - integers: r = hi - lo; draws with x < (2^64 - r) mod r are rejected (so
 *   every value is equally likely), then value = lo + x mod r.
 * Elements are filled in order, one accepted draw each.
 * "Same seed, same numbers" needs lo + span * u rounded twice, as written:
 * this file must be built with -ffp-contract=off, or a compiler targeting a
 * CPU with FMA fuses it (so does iota's start + i * step). */

typedef struct Rng { uint64_t s[4]; } Rng;

static uint64_t splitmix64(uint64_t *state)
{
  uint64_t z = (*state += 0x9e3779b97f4a7c15u);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
  return z ^ (z >> 31);
}

static void rng_seed(Rng *r, uint64_t seed)
{
  for (int k = 0; k < 4; k++)
    r->s[k] = splitmix64(&seed);
}

static inline uint64_t rotl(uint64_t x, int k)
{
  return (x << k) | (x >> (64 - k));
}

static inline uint64_t rng_next(Rng *r)
{
  uint64_t *s = r->s;
  uint64_t result = rotl(s[1] * 5, 7) * 9;
  uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return result;
}

static inline double rng_unit(Rng *r)
{
  return (double)(rng_next(r) >> 11) * 0x1p-53;
}

/* --- the kernels ----------------------------------------------------------
 * X(dtype, suffix, C type, arithmetic type). Integer arithmetic goes through
 * an unsigned type at least as wide as int, so that it wraps instead of
 * overflowing (undefined for signed types, and for uint16 promoted to int). */
#define FLOAT_TYPES(X) X(CL_F32, f32, float, float) X(CL_F64, f64, double, double)
#define SIGNED_TYPES(X)                                                        \
  X(CL_I8, i8, int8_t, unsigned) X(CL_I16, i16, int16_t, unsigned)             \
  X(CL_I32, i32, int32_t, uint32_t) X(CL_I64, i64, int64_t, uint64_t)
#define UNSIGNED_TYPES(X)                                                      \
  X(CL_U8, u8, uint8_t, unsigned) X(CL_U16, u16, uint16_t, unsigned)           \
  X(CL_U32, u32, uint32_t, uint32_t) X(CL_U64, u64, uint64_t, uint64_t)
#define INT_TYPES(X) SIGNED_TYPES(X) UNSIGNED_TYPES(X)
#define ALL_TYPES(X) FLOAT_TYPES(X) INT_TYPES(X)

#define OP_ADD(T, U) (T)((U)a + (U)b)
#define OP_SUB(T, U) (T)((U)a - (U)b)
#define OP_MUL(T, U) (T)((U)a * (U)b)
#define OP_FDIV(T, U) (a / b)
/* b == 0 was ruled out by the caller; -1 is the one divisor that overflows. */
#define OP_SDIV(T, U) (b == -1 ? (T)(0 - (U)a) : (T)(a / b))
#define OP_UDIV(T, U) (T)(a / b)

#define FSQRT(a) _Generic((a), float: sqrtf, double: sqrt)(a)
#define FABS(a) _Generic((a), float: fabsf, double: fabs)(a)

/* x[i] = x[i] OP b for a scalar b, and x[i] = x[i] OP y[i] for a view y. */
#define SCALAR_KERNEL(name, OP, S, T, U)                                       \
  static void name##_##S(void *xp, size_t n, const void *bp)                   \
  {                                                                            \
    T *x = xp;                                                                 \
    const T b = *(const T *)bp;                                                \
    for (size_t i = 0; i < n; i++) {                                           \
      const T a = x[i];                                                        \
      x[i] = OP(T, U);                                                         \
    }                                                                          \
  }
#define VIEW_KERNEL(name, OP, S, T, U)                                         \
  static void name##_##S(void *xp, const void *yp, size_t n)                   \
  {                                                                            \
    T *x = xp;                                                                 \
    const T *y = yp;                                                           \
    for (size_t i = 0; i < n; i++) {                                           \
      const T a = x[i], b = y[i];                                              \
      x[i] = OP(T, U);                                                         \
    }                                                                          \
  }

/* Kernels every element type has. */
/* The smallest (CMP <) or largest (CMP >) element into out; returns 1 if a
 * NaN was seen (x != x is never true for integers). */
#define EXTREME_KERNEL(name, CMP, S, T)                                        \
  static int name##_##S(const void *xp, size_t n, void *out)                   \
  {                                                                            \
    const T *x = xp;                                                           \
    T m = x[0];                                                                \
    int nan = 0;                                                               \
    for (size_t i = 0; i < n; i++) {                                           \
      nan |= x[i] != x[i];                                                     \
      m = x[i] CMP m ? x[i] : m;                                               \
    }                                                                          \
    *(T *)out = m;                                                             \
    return nan;                                                                \
  }

#define COMMON_KERNELS(E, S, T, U)                                             \
  static void fill_##S(void *xp, size_t n, const void *bp)                     \
  {                                                                            \
    T *x = xp;                                                                 \
    const T b = *(const T *)bp;                                                \
    for (size_t i = 0; i < n; i++)                                             \
      x[i] = b;                                                                \
  }                                                                            \
  SCALAR_KERNEL(add_s, OP_ADD, S, T, U)                                        \
  SCALAR_KERNEL(sub_s, OP_SUB, S, T, U)                                        \
  SCALAR_KERNEL(mul_s, OP_MUL, S, T, U)                                        \
  VIEW_KERNEL(add_v, OP_ADD, S, T, U)                                          \
  VIEW_KERNEL(sub_v, OP_SUB, S, T, U)                                          \
  VIEW_KERNEL(mul_v, OP_MUL, S, T, U)                                          \
  EXTREME_KERNEL(min, <, S, T)                                                 \
  EXTREME_KERNEL(max, >, S, T)                                                 \
  static void to_double_##S(const void *xp, double *d, size_t n)               \
  {                                                                            \
    const T *x = xp;                                                           \
    for (size_t i = 0; i < n; i++)                                             \
      d[i] = (double)x[i];                                                     \
  }

#define FLOAT_KERNELS(E, S, T, U)                                              \
  COMMON_KERNELS(E, S, T, U)                                                   \
  SCALAR_KERNEL(div_s, OP_FDIV, S, T, U)                                       \
  VIEW_KERNEL(div_v, OP_FDIV, S, T, U)                                         \
  static void sqrt_##S(void *xp, size_t n)                                     \
  {                                                                            \
    T *x = xp;                                                                 \
    for (size_t i = 0; i < n; i++)                                             \
      x[i] = FSQRT(x[i]);                                                      \
  }                                                                            \
  static void abs_##S(void *xp, size_t n)                                      \
  {                                                                            \
    T *x = xp;                                                                 \
    for (size_t i = 0; i < n; i++)                                             \
      x[i] = FABS(x[i]);                                                       \
  }                                                                            \
  static void from_double_##S(void *xp, const double *d, size_t n)            \
  {                                                                            \
    T *x = xp;                                                                 \
    for (size_t i = 0; i < n; i++)                                             \
      x[i] = (T)d[i];                                                          \
  }                                                                            \
  /* Neumaier's compensated sum in double; inf and NaN pass through plainly  \
   * (the compensation term of an infinite sum would be NaN). */             \
  static double sum_##S(const void *xp, size_t n)                              \
  {                                                                            \
    const T *x = xp;                                                           \
    double s = 0, c = 0;                                                       \
    for (size_t i = 0; i < n; i++) {                                           \
      double xi = x[i], t = s + xi;                                            \
      c += fabs(s) >= fabs(xi) ? (s - t) + xi : (xi - t) + s;                  \
      s = t;                                                                   \
    }                                                                          \
    return isfinite(s) ? s + c : s;                                            \
  }                                                                            \
  /* start + i * step in double, rounded once to the element type. */         \
  static void iota_##S(void *xp, size_t n, double start, double step)          \
  {                                                                            \
    T *x = xp;                                                                 \
    for (size_t i = 0; i < n; i++)                                             \
      x[i] = (T)(start + (double)i * step);                                    \
  }                                                                            \
  static void random_##S(void *xp, size_t n, Rng *r, double lo, double hi)     \
  {                                                                            \
    T *x = xp;                                                                 \
    const double span = hi - lo;                                               \
    for (size_t i = 0; i < n; i++) {                                           \
      T v;                                                                     \
      do                                                                       \
        v = (T)(lo + span * rng_unit(r));                                      \
      while (!(v < (T)hi));                                                    \
      x[i] = v;                                                                \
    }                                                                          \
  }

/* Integer sums: elements of up to 32 bits add in int64 blocks (which the
 * vectorizer widens), 64-bit elements straight into 128 bits. */
#define SUM_BLOCK ((size_t)1 << 20)     /* 2^20 * 2^32 fits in int64 */

#define INT_KERNELS(E, S, T, U)                                                \
  COMMON_KERNELS(E, S, T, U)                                                   \
  static int128 sum_##S(const void *xp, size_t n)                              \
  {                                                                            \
    const T *x = xp;                                                           \
    int128 total = 0;                                                          \
    if (sizeof(T) == 8) {                                                      \
      for (size_t i = 0; i < n; i++)                                           \
        total += x[i];                                                         \
      return total;                                                            \
    }                                                                          \
    for (size_t i = 0; i < n; i += SUM_BLOCK) {                                \
      size_t end = n - i < SUM_BLOCK ? n : i + SUM_BLOCK;                      \
      int64_t s = 0;                                                           \
      for (size_t j = i; j < end; j++)                                         \
        s += (int64_t)x[j];                                                    \
      total += s;                                                              \
    }                                                                          \
    return total;                                                              \
  }                                                                            \
  /* The caller checked that both ends fit in T, so every value does, and   \
   * arithmetic modulo 2^64 gives it exactly. */                              \
  static void iota_##S(void *xp, size_t n, int64_t start, int64_t step)        \
  {                                                                            \
    T *x = xp;                                                                 \
    for (size_t i = 0; i < n; i++)                                             \
      x[i] = (T)((uint64_t)start + (uint64_t)i * (uint64_t)step);              \
  }                                                                            \
  static void random_##S(void *xp, size_t n, Rng *r, int64_t lo, uint64_t range) \
  {                                                                            \
    T *x = xp;                                                                 \
    const uint64_t threshold = (0 - range) % range;                            \
    for (size_t i = 0; i < n; i++) {                                           \
      uint64_t d;                                                              \
      do                                                                       \
        d = rng_next(r);                                                       \
      while (d < threshold);                                                   \
      x[i] = (T)((uint64_t)lo + d % range);                                    \
    }                                                                          \
  }                                                                            \
  static size_t first_zero_##S(const void *xp, size_t n)                       \
  {                                                                            \
    const T *x = xp;                                                           \
    for (size_t i = 0; i < n; i++)                                             \
      if (x[i] == 0)                                                           \
        return i;                                                              \
    return n;                                                                  \
  }                                                                            \
  static void sqrt_##S(void *xp, size_t n)                                     \
  {                                                                            \
    T *x = xp;                                                                 \
    for (size_t i = 0; i < n; i++)                                             \
      x[i] = (T)isqrt((uint64_t)x[i]);                                         \
  }

/* x[i] /= y[i] where y may hold a zero that an earlier step wrote (y
 * overlaps x from below): checks each divisor as it reads it, and returns
 * the index of the first zero, n for none. Not vectorized: it is the rare
 * case, and the check must see what the previous step wrote. */
#define CHECKED_DIV_KERNEL(OP, S, T, U)                                        \
  static size_t div_checked_##S(void *xp, const void *yp, size_t n)            \
  {                                                                            \
    T *x = xp;                                                                 \
    const T *y = yp;                                                           \
    for (size_t i = 0; i < n; i++) {                                           \
      const T a = x[i], b = y[i];                                              \
      if (b == 0)                                                              \
        return i;                                                              \
      x[i] = OP(T, U);                                                         \
    }                                                                          \
    return n;                                                                  \
  }

#define SIGNED_KERNELS(E, S, T, U)                                             \
  INT_KERNELS(E, S, T, U)                                                      \
  SCALAR_KERNEL(div_s, OP_SDIV, S, T, U)                                       \
  VIEW_KERNEL(div_v, OP_SDIV, S, T, U)                                         \
  CHECKED_DIV_KERNEL(OP_SDIV, S, T, U)                                         \
  static void abs_##S(void *xp, size_t n)                                      \
  {                                                                            \
    T *x = xp;                                                                 \
    for (size_t i = 0; i < n; i++)                                             \
      x[i] = x[i] < 0 ? (T)(0 - (U)x[i]) : x[i];                               \
  }                                                                            \
  static size_t first_negative_##S(const void *xp, size_t n)                   \
  {                                                                            \
    const T *x = xp;                                                           \
    for (size_t i = 0; i < n; i++)                                             \
      if (x[i] < 0)                                                            \
        return i;                                                              \
    return n;                                                                  \
  }

#define UNSIGNED_KERNELS(E, S, T, U)                                           \
  INT_KERNELS(E, S, T, U)                                                      \
  SCALAR_KERNEL(div_s, OP_UDIV, S, T, U)                                       \
  VIEW_KERNEL(div_v, OP_UDIV, S, T, U)                                         \
  CHECKED_DIV_KERNEL(OP_UDIV, S, T, U)

/* floor(sqrt(x)), exactly. The double square root can be one too high (x =
 * k^2 - 1 rounds up to k^2); it is never one too low for 64-bit x, but the
 * second loop keeps correctness from resting on that rounding argument. */
static uint64_t isqrt(uint64_t x)
{
  uint64_t r = (uint64_t)sqrt((double)x);
  while (r > 0 && r > x / r)
    r--;
  while (r + 1 <= x / (r + 1))
    r++;
  return r;
}

FLOAT_TYPES(FLOAT_KERNELS)
SIGNED_TYPES(SIGNED_KERNELS)
UNSIGNED_TYPES(UNSIGNED_KERNELS)

/* The kernels of one element type; those of the other kind are NULL. */
typedef struct Ops {
  void (*fill)(void *x, size_t n, const void *b);
  void (*add_s)(void *x, size_t n, const void *b);
  void (*sub_s)(void *x, size_t n, const void *b);
  void (*mul_s)(void *x, size_t n, const void *b);
  void (*div_s)(void *x, size_t n, const void *b);
  void (*add_v)(void *x, const void *y, size_t n);
  void (*sub_v)(void *x, const void *y, size_t n);
  void (*mul_v)(void *x, const void *y, size_t n);
  void (*div_v)(void *x, const void *y, size_t n);
  void (*sqrt)(void *x, size_t n);
  void (*abs)(void *x, size_t n);           /* NULL: the identity (unsigned) */
  void (*to_double)(const void *x, double *d, size_t n);
  int (*min)(const void *x, size_t n, void *out);
  int (*max)(const void *x, size_t n, void *out);
  /* floats */
  void (*from_double)(void *x, const double *d, size_t n);
  double (*fsum)(const void *x, size_t n);
  void (*fiota)(void *x, size_t n, double start, double step);
  void (*frandom)(void *x, size_t n, Rng *r, double lo, double hi);
  /* integers */
  int128 (*isum)(const void *x, size_t n);
  void (*iiota)(void *x, size_t n, int64_t start, int64_t step);
  void (*irandom)(void *x, size_t n, Rng *r, int64_t lo, uint64_t range);
  size_t (*first_zero)(const void *x, size_t n);
  size_t (*div_checked)(void *x, const void *y, size_t n);
  size_t (*first_negative)(const void *x, size_t n);  /* NULL: unsigned */
} Ops;

#define COMMON_OPS(S)                                                          \
  .fill = fill_##S, .add_s = add_s_##S, .sub_s = sub_s_##S,                    \
  .mul_s = mul_s_##S, .div_s = div_s_##S, .add_v = add_v_##S,                  \
  .sub_v = sub_v_##S, .mul_v = mul_v_##S, .div_v = div_v_##S,                  \
  .sqrt = sqrt_##S, .to_double = to_double_##S, .min = min_##S, .max = max_##S
#define FLOAT_OPS(E, S, T, U)                                                  \
  [E] = {COMMON_OPS(S), .abs = abs_##S, .from_double = from_double_##S,        \
         .fsum = sum_##S, .fiota = iota_##S, .frandom = random_##S},
#define INT_OPS(E, S, T, U)                                                    \
  .isum = sum_##S, .iiota = iota_##S, .irandom = random_##S,                   \
  .first_zero = first_zero_##S, .div_checked = div_checked_##S
#define SIGNED_OPS(E, S, T, U)                                                 \
  [E] = {COMMON_OPS(S), INT_OPS(E, S, T, U), .abs = abs_##S,                   \
         .first_negative = first_negative_##S},
#define UNSIGNED_OPS(E, S, T, U) [E] = {COMMON_OPS(S), INT_OPS(E, S, T, U)},

static const Ops ops[CL_NDTYPES] = {
  FLOAT_TYPES(FLOAT_OPS) SIGNED_TYPES(SIGNED_OPS) UNSIGNED_TYPES(UNSIGNED_OPS)
};

/* --- checking views and arguments ----------------------------------------- */

static int is_signed(cl_DType t)
{
  return t == CL_I8 || t == CL_I16 || t == CL_I32 || t == CL_I64;
}

/* The values an integer type holds: [*lo, *hi]. */
static void int_bounds(cl_DType t, int128 *lo, int128 *hi)
{
  int bits = 8 * cl_dtype_sizes[t];
  if (is_signed(t)) {
    *lo = -((int128)1 << (bits - 1));
    *hi = ((int128)1 << (bits - 1)) - 1;
  } else {
    *lo = 0;
    *hi = ((int128)1 << bits) - 1;
  }
}

/* The view operand at slot i: a host view of v's length and, unless any_type, dtype. */
static View *check_operand(lua_State *L, int i, const View *v, int any_type)
{
  View *o = view_check_host(L, i);
  if (o->len != v->len)
    luaL_error(L, "length mismatch: %s of %I elements and operand of %I", CL_VIEW,
               (lua_Integer)v->len, (lua_Integer)o->len);
  if (!any_type && o->type != v->type)
    luaL_error(L, "dtype mismatch: %s of %s and operand of %s", CL_VIEW,
               cl_dtype_names[v->type], cl_dtype_names[o->type]);
  return o;
}

static int return_self(lua_State *L)
{
  lua_settop(L, 1);
  return 1;
}

/* --- filling ---------------------------------------------------------------- */

static int view_fill(lua_State *L)
{
  View *v = view_check_host(L, 1);
  cl_Scalar s;
  cl_scalar_store(L, 2, v->type, &s);
  ops[v->type].fill(v->base, v->len, s.v.bytes);
  return return_self(L);
}

/* v:iota(start, step): element i = start + (i - 1) * step. Floats compute in
 * double and round once; integers must fit, first to last element. */
static int view_iota(lua_State *L)
{
  View *v = view_check_host(L, 1);
  const Ops *o = &ops[v->type];
  if (o->fiota) {
    double start = luaL_checknumber(L, 2), step = luaL_optnumber(L, 3, 1);
    double last = start + (double)(v->len ? v->len - 1 : 0) * step;
    /* the values run monotonically from start to last */
    if (v->type == CL_F32 && !(cl_fits_float32(start) && cl_fits_float32(last)))
      return luaL_error(L, "iota(%f, %f) over %I elements leaves the range of float32",
                        (lua_Number)start, (lua_Number)step, (lua_Integer)v->len);
    o->fiota(v->base, v->len, start, step);
    return return_self(L);
  }
  lua_Integer start = luaL_checkinteger(L, 2), step = luaL_optinteger(L, 3, 1);
  int128 lo, hi;
  int_bounds(v->type, &lo, &hi);
  int128 last = (int128)start + (int128)step * (int128)(v->len ? v->len - 1 : 0);
  if (start < lo || start > hi || last < lo || last > hi)
    return luaL_error(L, "iota(%I, %I) over %I elements leaves the range of %s", start, step,
                      (lua_Integer)v->len, cl_dtype_names[v->type]);
  o->iiota(v->base, v->len, start, step);
  return return_self(L);
}

/* v:random(lo, hi [, seed = 0]): uniform in [lo, hi); see "the generator". */
static int view_random(lua_State *L)
{
  View *v = view_check_host(L, 1);
  const Ops *o = &ops[v->type];
  Rng r;
  rng_seed(&r, (uint64_t)luaL_optinteger(L, 4, 0));
  if (o->frandom) {
    double lo = luaL_checknumber(L, 2), hi = luaL_checknumber(L, 3);
    if (v->type == CL_F32) {
      if (!cl_fits_float32(lo) || !cl_fits_float32(hi))
        return luaL_error(L, "random: [%f, %f) leaves the range of float32", (lua_Number)lo,
                          (lua_Number)hi);
      lo = (float)lo;
      hi = (float)hi;
    }
    if (!(lo < hi) || !isfinite(hi - lo))
      return luaL_error(L, "random: need finite lo < hi for %s, got [%f, %f)",
                        cl_dtype_names[v->type], (lua_Number)lo, (lua_Number)hi);
    o->frandom(v->base, v->len, &r, lo, hi);
    return return_self(L);
  }
  lua_Integer lo = luaL_checkinteger(L, 2), hi = luaL_checkinteger(L, 3);
  int128 tlo, thi;
  int_bounds(v->type, &tlo, &thi);
  if (lo >= hi || lo < tlo || (int128)hi - 1 > thi)
    return luaL_error(L, "random: need integers lo < hi with [lo, hi) inside %s, got [%I, %I)",
                      cl_dtype_names[v->type], lo, hi);
  o->irandom(v->base, v->len, &r, lo, (uint64_t)hi - (uint64_t)lo);
  return return_self(L);
}

/* --- copy --------------------------------------------------------------------
 * v:copy(src) copies src into v. Same dtype: a memmove (views of one buffer
 * may overlap). Different dtypes convert each element exactly as v[i] = x
 * would: to floats by rounding, to integers only for values the type holds;
 * float64 values beyond float32's range are errors, not infinities. An error
 * names the first element that does not fit; elements before it may have
 * been written. */

#define CONVERT_BLOCK 512

static int overlaps(const View *a, const View *b)
{
  const unsigned char *a_end = a->base + a->len * cl_dtype_sizes[a->type];
  const unsigned char *b_end = b->base + b->len * cl_dtype_sizes[b->type];
  return a->base < b_end && b->base < a_end;
}

static size_t first_past_float32(const double *d, size_t n)
{
  for (size_t i = 0; i < n; i++)
    if (!cl_fits_float32(d[i]))
      return i;
  return n;
}

static void copy_to_float(lua_State *L, View *dst, const View *src)
{
  double tmp[CONVERT_BLOCK];
  for (size_t i = 0; i < dst->len; i += CONVERT_BLOCK) {
    size_t m = dst->len - i < CONVERT_BLOCK ? dst->len - i : CONVERT_BLOCK;
    ops[src->type].to_double(view_element(src, i), tmp, m);
    size_t bad = dst->type == CL_F32 ? first_past_float32(tmp, m) : m;
    if (bad < m)
      luaL_error(L, "copy: element %I: %f out of range for float32", (lua_Integer)(i + bad) + 1,
                 (lua_Number)tmp[bad]);
    ops[dst->type].from_double(view_element(dst, i), tmp, m);
  }
}

typedef struct Conversion { View *dst; const View *src; size_t done; } Conversion;

/* Run under lua_pcall so that a range error can be re-raised naming the
 * element; pushing numbers allocates nothing. */
static int convert_elements(lua_State *L)
{
  Conversion *c = lua_touserdata(L, 1);
  /* calling this function may have grown the stack, a GC step whose
   * finalizers could close either buffer */
  view_check_open(L, c->dst);
  view_check_open(L, c->src);
  for (; c->done < c->dst->len; c->done++) {
    cl_dtype_push(L, c->src->type, view_element(c->src, c->done));
    cl_dtype_store(L, -1, c->dst->type, view_element(c->dst, c->done));
    lua_pop(L, 1);
  }
  return 0;
}

static void copy_to_integer(lua_State *L, View *dst, const View *src)
{
  Conversion c = {dst, src, 0};
  lua_pushcfunction(L, convert_elements);
  lua_pushlightuserdata(L, &c);
  int status = lua_pcall(L, 1, 0, 0);
  if (status == LUA_ERRRUN && lua_type(L, -1) == LUA_TSTRING)
    luaL_error(L, "copy: element %I: %s", (lua_Integer)c.done + 1, lua_tostring(L, -1));
  if (status != LUA_OK)
    lua_error(L);
}

static int view_copy(lua_State *L)
{
  View *v = view_check_host(L, 1);
  View *src = check_operand(L, 2, v, 1);
  if (src->type == v->type)
    memmove(v->base, src->base, v->len * cl_dtype_sizes[v->type]);
  else if (overlaps(v, src))
    return luaL_error(L, "copy: %s and %s views overlap in memory", cl_dtype_names[src->type],
                      cl_dtype_names[v->type]);
  else if (cl_dtype_is_float(v->type))
    copy_to_float(L, v, src);
  else
    copy_to_integer(L, v, src);
  return return_self(L);
}

/* --- elementwise arithmetic ------------------------------------------------- */

typedef enum { ADD, SUB, MUL, DIV } Arith;

static void check_divisor_scalar(lua_State *L, const View *v, const cl_Scalar *s)
{
  static const unsigned char zero[8] = {0};
  if (!cl_dtype_is_float(v->type) && memcmp(s->v.bytes, zero, cl_dtype_sizes[v->type]) == 0)
    luaL_error(L, "integer division by zero (%s)", cl_dtype_names[v->type]);
}

static void divisor_zero_error(lua_State *L, size_t k, const char *why)
{
  luaL_error(L, "integer division by zero: divisor element %I is 0%s", (lua_Integer)k + 1, why);
}

/* v:div(y) for integer views. When y starts below v and overlaps it, the
 * loop writes into divisors it has yet to read, so zeros can appear as it
 * runs: the checked kernel finds them there (elements before have been
 * written). Otherwise every divisor is read as it is now: check them all
 * first, then run the vectorized kernel. */
static void integer_div_view(lua_State *L, View *v, const View *y)
{
  const Ops *o = &ops[v->type];
  if (y->base < v->base && overlaps(v, y)) {
    size_t k = o->div_checked(v->base, y->base, v->len);
    if (k < v->len)
      divisor_zero_error(L, k, " (written by this division: the operands overlap)");
    return;
  }
  size_t k = o->first_zero(y->base, y->len);
  if (k < y->len)
    divisor_zero_error(L, k, "");
  o->div_v(v->base, y->base, v->len);
}

/* v:add(x_or_view) and friends: a number, or a view of the same dtype and
 * length. */
static int arith(lua_State *L, Arith op)
{
  View *v = view_check_host(L, 1);
  const Ops *o = &ops[v->type];
  if (lua_type(L, 2) == LUA_TNUMBER) {
    cl_Scalar s;
    cl_scalar_store(L, 2, v->type, &s);
    void (*const kernel[])(void *, size_t, const void *) = {o->add_s, o->sub_s, o->mul_s, o->div_s};
    if (op == DIV)
      check_divisor_scalar(L, v, &s);
    kernel[op](v->base, v->len, s.v.bytes);
    return return_self(L);
  }
  if (!cl_fast_test(L, 2, CL_UV_VIEW))
    return luaL_typeerror(L, 2, "number or cuda.View");
  View *y = check_operand(L, 2, v, 0);
  void (*const kernel[])(void *, const void *, size_t) = {o->add_v, o->sub_v, o->mul_v, o->div_v};
  if (op == DIV && !cl_dtype_is_float(v->type))
    integer_div_view(L, v, y);
  else
    kernel[op](v->base, y->base, v->len);
  return return_self(L);
}

static int view_add(lua_State *L) { return arith(L, ADD); }
static int view_sub(lua_State *L) { return arith(L, SUB); }
static int view_mul(lua_State *L) { return arith(L, MUL); }
static int view_div(lua_State *L) { return arith(L, DIV); }

/* v:scale(a): mul by a number only. */
static int view_scale(lua_State *L)
{
  luaL_checktype(L, 2, LUA_TNUMBER);
  return arith(L, MUL);
}

static int view_sqrt(lua_State *L)
{
  View *v = view_check_host(L, 1);
  const Ops *o = &ops[v->type];
  if (o->first_negative) {
    size_t k = o->first_negative(v->base, v->len);
    if (k < v->len)
      return luaL_error(L, "sqrt of a negative integer: element %I", (lua_Integer)k + 1);
  }
  o->sqrt(v->base, v->len);
  return return_self(L);
}

static int view_abs(lua_State *L)
{
  View *v = view_check_host(L, 1);
  if (ops[v->type].abs)
    ops[v->type].abs(v->base, v->len);
  return return_self(L);
}

/* --- reductions ------------------------------------------------------------- */

static void push_int128(lua_State *L, int128 x)
{
  if (x >= INT64_MIN && x <= INT64_MAX)
    lua_pushinteger(L, (lua_Integer)x);
  else
    lua_pushnumber(L, (lua_Number)x);
}

static int view_sum(lua_State *L)
{
  View *v = view_check_host(L, 1);
  const Ops *o = &ops[v->type];
  if (o->fsum)
    lua_pushnumber(L, o->fsum(v->base, v->len));
  else
    push_int128(L, o->isum(v->base, v->len));
  return 1;
}

static int extreme(lua_State *L, int want_max)
{
  View *v = view_check_host(L, 1);
  cl_Scalar m;
  if (v->len == 0)
    return luaL_error(L, "%s of an empty %s", want_max ? "max" : "min", CL_VIEW);
  const Ops *o = &ops[v->type];
  if ((want_max ? o->max : o->min)(v->base, v->len, m.v.bytes))
    lua_pushnumber(L, (lua_Number)NAN);
  else
    cl_dtype_push(L, v->type, m.v.bytes);
  return 1;
}

static int view_min(lua_State *L) { return extreme(L, 0); }
static int view_max(lua_State *L) { return extreme(L, 1); }

/* --- allclose ----------------------------------------------------------------
 * numpy's rule, in double: a[i] is close to b[i] when a[i] == b[i] (equal
 * infinities included) or |a[i] - b[i]| <= atol + rtol * |b[i]|. NaN is never
 * close. max_abs_err is the largest |a[i] - b[i]| (0 where equal), NaN when
 * any pair has a NaN. int64 values past 2^53 are compared after rounding to
 * double. */

typedef struct Closeness {
  double rtol, atol, max_err;
  int nan;
  size_t first_bad;             /* 0-based; SIZE_MAX while none */
} Closeness;

/* Counts the pairs of one block that are not close; vectorizable. */
static size_t count_not_close(const double *a, const double *b, size_t m, Closeness *c)
{
  size_t bad = 0;
  double max_err = c->max_err;
  int nan = 0;
  for (size_t i = 0; i < m; i++) {
    /* equal first: rtol * |inf| is NaN even when rtol is 0 */
    int equal = a[i] == b[i];
    double err = equal ? 0 : fabs(a[i] - b[i]);
    int close = equal | (err <= c->atol + c->rtol * fabs(b[i]));
    bad += !close;
    nan |= err != err;
    max_err = err > max_err ? err : max_err;
  }
  c->max_err = max_err;
  c->nan |= nan;
  return bad;
}

static size_t first_not_close(const double *a, const double *b, size_t m, const Closeness *c)
{
  for (size_t i = 0; i < m; i++)
    if (!(a[i] == b[i] || fabs(a[i] - b[i]) <= c->atol + c->rtol * fabs(b[i])))
      return i;
  return m;
}

static double check_tolerance(lua_State *L, int i, double def)
{
  double x = luaL_optnumber(L, i, def);
  if (!(x >= 0))
    luaL_argerror(L, i, "tolerance must be a number >= 0");
  return x;
}

/* v:allclose(other [, rtol = 1e-5, atol = 1e-8]) -> ok, max_abs_err, first_bad_index */
static int view_allclose(lua_State *L)
{
  View *v = view_check_host(L, 1);
  View *w = check_operand(L, 2, v, 1);
  Closeness c = {check_tolerance(L, 3, 1e-5), check_tolerance(L, 4, 1e-8), 0, 0, SIZE_MAX};
  double a[CONVERT_BLOCK], b[CONVERT_BLOCK];
  for (size_t i = 0; i < v->len; i += CONVERT_BLOCK) {
    size_t m = v->len - i < CONVERT_BLOCK ? v->len - i : CONVERT_BLOCK;
    ops[v->type].to_double(view_element(v, i), a, m);
    ops[w->type].to_double(view_element(w, i), b, m);
    if (count_not_close(a, b, m, &c) && c.first_bad == SIZE_MAX)
      c.first_bad = i + first_not_close(a, b, m, &c);
  }
  lua_pushboolean(L, c.first_bad == SIZE_MAX);
  lua_pushnumber(L, c.nan ? (lua_Number)NAN : c.max_err);
  if (c.first_bad == SIZE_MAX)
    lua_pushnil(L);
  else
    lua_pushinteger(L, (lua_Integer)c.first_bad + 1);
  return 3;
}
void cl_open_view_math(lua_State *L)
{
  static const luaL_Reg methods[] = {
    {"fill", view_fill}, {"iota", view_iota}, {"random", view_random}, {"copy", view_copy},
    {"scale", view_scale}, {"add", view_add}, {"sub", view_sub}, {"mul", view_mul},
    {"div", view_div}, {"sqrt", view_sqrt}, {"abs", view_abs}, {"sum", view_sum},
    {"min", view_min}, {"max", view_max}, {"allclose", view_allclose}, {NULL, NULL}
  };
  cl_add_methods(L, CL_VIEW, methods);
}
