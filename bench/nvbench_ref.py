#!/usr/bin/env python3
# NVBench's side of the comparison: the kernels of scripts/bench_example.lua
# (copy<T> over uint8_t/uint32_t/double and 2^16..2^28 bytes; a sleep kernel
# of 10 us/100 us/1 ms) measured by cuda-bench 0.3.0 (NVBench's Python API),
# compiled and launched with cuda.core as cuda-bench's own examples do.
#
#   python3 bench/nvbench_ref.py --json nvbench.json [NVBench options]
#
# bench/nvbench_compare.sh runs it next to `cudalua bench` on the same GPU.
# SPDX-License-Identifier: MIT
import sys

import cuda.bench as bench

try:
    from cuda.core import Device, LaunchConfig, Program, ProgramOptions, launch
except ImportError:  # cuda.core before 0.4
    from cuda.core.experimental import Device, LaunchConfig, Program, ProgramOptions, launch

SOURCE = r"""
typedef unsigned char uint8_t;
typedef unsigned int uint32_t;
template <typename T>
__global__ void copy(const T *__restrict__ in, T *__restrict__ out, unsigned long long n)
{
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = in[i];
}
extern "C" __global__ void sleep_kernel(unsigned long long ns)
{
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    __nanosleep(1000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}
"""

SIZES = {"uint8_t": 1, "uint32_t": 4, "double": 8}
NAMES = ["copy<uint8_t>", "copy<uint32_t>", "copy<double>"]
_kernels = {}
_streams = {}


def kernels(dev):
    """Compiles the source once per device, every copy<T> by name expression."""
    if dev.device_id not in _kernels:
        opts = ProgramOptions(std="c++17", arch=f"sm_{dev.arch}")
        obj = Program(SOURCE, code_type="c++", options=opts).compile("cubin", name_expressions=NAMES + ["sleep_kernel"])
        _kernels[dev.device_id] = obj
    return _kernels[dev.device_id]


def core_stream(dev, launch_obj):
    """The cuda.core Stream of NVBench's stream (made once per stream)."""
    cs = launch_obj.get_stream()
    key = cs.addressof()
    s = _streams.get(key)
    if s is None:
        s = dev.create_stream(cs)
        _streams[key] = s
    return s


def copy(state: bench.State):
    T = state.get_string("T")
    nbytes = state.get_int64("Bytes")
    n = nbytes // SIZES[T]
    dev = Device(state.get_device())
    dev.set_current()
    kernel = kernels(dev).get_kernel(f"copy<{T}>")
    setup = dev.create_stream()
    src = dev.memory_resource.allocate(nbytes, stream=setup)
    dst = dev.memory_resource.allocate(nbytes, stream=setup)
    setup.sync()
    block = 256
    grid = min((n + block - 1) // block, dev.properties.multiprocessor_count * 8)
    config = LaunchConfig(grid=grid, block=block)
    state.add_element_count(n)
    state.add_global_memory_reads(nbytes)
    state.add_global_memory_writes(nbytes)
    import ctypes
    count = ctypes.c_uint64(n)

    def run(launch_obj):
        launch(core_stream(dev, launch_obj), config, kernel, src, dst, count)

    state.exec(run)
    src.close(stream=setup)
    dst.close(stream=setup)
    setup.sync()


def sleep(state: bench.State):
    us = state.get_int64("Duration_us")
    dev = Device(state.get_device())
    dev.set_current()
    kernel = kernels(dev).get_kernel("sleep_kernel")
    config = LaunchConfig(grid=1, block=1)
    import ctypes
    ns = ctypes.c_uint64(us * 1000)

    def run(launch_obj):
        launch(core_stream(dev, launch_obj), config, kernel, ns)

    state.exec(run)


b = bench.register(copy)
b.set_name("copy")
b.add_string_axis("T", ["uint8_t", "uint32_t", "double"])
b.add_int64_power_of_two_axis("Bytes", [16, 20, 24, 28])

s = bench.register(sleep)
s.set_name("sleep")
s.add_int64_axis("Duration_us", [10, 100, 1000])

if __name__ == "__main__":
    bench.run_all_benchmarks(sys.argv)
