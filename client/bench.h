/*
 * bench.h — `infer bench`: benchmarks of a running daemon through its
 * public API, measured the way vLLM's serving benchmark measures.
 *
 *   infer bench serve   a load generator: N streaming requests at a fixed
 *                       concurrency or with Poisson arrivals; random-token
 *                       prompts of a given length (or a prompts file);
 *                       reports TTFT, TPOT, ITL and end-to-end latency
 *                       (mean, p50, p90, p99) and request / token
 *                       throughput; --sweep runs several concurrencies,
 *                       --json and --plot write the results.
 *   infer bench cache   the same prompt, 256 new tokens, greedy, with
 *                       use_cache on and off, 3 repetitions each: both
 *                       latencies and the speedup.
 *   infer bench plot    redraws a sweep's SVG from the JSON of bench serve.
 *
 * All requests of a run are driven by one thread with poll(2) over
 * non-blocking sockets (one connection per request), so the generator
 * itself stays cheap at high concurrency. Timestamps are CLOCK_MONOTONIC.
 *
 * Takes argv as main() does (argv[0] = "bench") and returns a process exit
 * status (cli.h). Main thread only.
 */
#ifndef IFD_CLIENT_BENCH_H
#define IFD_CLIENT_BENCH_H

int ifd_cli_bench_main(int argc, char **argv);

#endif
