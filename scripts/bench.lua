-- Run a file of registered benchmarks (bench.register), as NVBench runs its benchmarks
-- SPDX-License-Identifier: MIT
--
-- cudalua bench FILE.lua [options]: the file registers benchmarks with
-- require("cuda.bench").register(fn); this runs them and prints NVBench's
-- markdown table (stdout), progress on stderr, and writes --json (NVBench's
-- schema), --csv and --md files. The options are NVBench's: see --help and
-- cuda.bench.cli.
require("cuda.bench.cli").main(arg, "bench", require("cuda.results").description())
