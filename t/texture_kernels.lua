-- The kernels t/array.t and t/array_fake.t launch: the fake driver
-- emulates tex_fetch and surf_fill by name (t/fake/launch.c); tex_bilinear
-- runs only on a GPU.
return [[
typedef unsigned long long u64;
#define FOR_EACH(i, n) \
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < (n); i += (u64)gridDim.x * blockDim.x)

/* out[i] = element (i % w, i / w), read at the texel's centre */
extern "C" __global__ void tex_fetch(cudaTextureObject_t tex, float *out, u64 w, u64 n)
{
  FOR_EACH(i, n)
    out[i] = tex2D<float>(tex, (float)(i % w) + 0.5f, (float)(i / w) + 0.5f);
}

/* element (i % w, i / w) = value + i, written through the surface */
extern "C" __global__ void surf_fill(cudaSurfaceObject_t surf, float value, u64 w, u64 n)
{
  FOR_EACH(i, n)
    surf2Dwrite(value + (float)i, surf, (int)((i % w) * sizeof(float)), (int)(i / w));
}

/* out[i] = the texture sampled at (xs[i], ys[i]) */
extern "C" __global__ void tex_bilinear(cudaTextureObject_t tex, const float *xs, const float *ys,
                                        float *out, u64 n)
{
  FOR_EACH(i, n)
    out[i] = tex2D<float>(tex, xs[i], ys[i]);
}
]]
