/*
 * test_daemon_config.c — the daemon's settings table (daemon/config.h):
 * defaults, flag syntax (--k v, --k=v, --[no-]bool), value types and units,
 * ranges, the JSON file (unknown keys and wrong types refused), flags over
 * the file, reload of reloadable keys only; the number type
 * (gpu_memory_fraction) and the GPU list (daemon/gpu.h); and the metrics
 * exposition (daemon/metrics.h); --inspect PATH [--json], which needs no
 * settings.
 */
#include "testutil.h"

#include "daemon/config.h"
#include "daemon/gpu.h"
#include "daemon/metrics.h"
#include "error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int parse(ifd_config_t *c, ifd_config_cli_t *cli, char *err, int n, ...)
{
    char *argv[32];
    va_list ap;
    va_start(ap, n);
    argv[0] = (char *)"inferd";
    for (int i = 0; i < n; i++)
        argv[i + 1] = va_arg(ap, char *);
    va_end(ap);
    return ifd_config_from_args(c, cli, n + 1, argv, err, 512);
}

static char *write_tmp(const char *text)
{
    static char path[64];
    snprintf(path, sizeof path, "/tmp/ifd-cfg-XXXXXX");
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    return path;
}

START_TEST(test_defaults_and_flags)
{
    ifd_config_t c;
    ifd_config_cli_t cli;
    char err[512] = "";
    ck_assert_int_eq(parse(&c, &cli, err, 0), 0);
    ck_assert_int_eq(c.workers, 1);
    ck_assert_int_eq(c.max_queue, 256);
    ck_assert_uint_eq(c.kv_budget, 1ull << 30);
    ck_assert(c.prefix_cache);
    ck_assert_str_eq(c.socket_mode, "0660");
    ifd_config_free(&c);
    ifd_config_cli_free(&cli);

    ck_assert_int_eq(parse(&c, &cli, err, 8, "--max-queue", "7", "--kv-budget=512M",
                           "--no-prefix-cache", "--header-timeout", "250ms", "--model", "m.gguf"),
                     0);
    ck_assert_int_eq(c.max_queue, 7);
    ck_assert_uint_eq(c.kv_budget, 512ull << 20);
    ck_assert(!c.prefix_cache);
    ck_assert(c.header_timeout > 0.2499 && c.header_timeout < 0.2501);
    ck_assert_str_eq(c.model, "m.gguf");
    ifd_config_free(&c);
    ifd_config_cli_free(&cli);
}
END_TEST

START_TEST(test_bad_flags)
{
    ifd_config_t c;
    ifd_config_cli_t cli;
    char err[512] = "";
    ck_assert_int_eq(parse(&c, &cli, err, 1, "--max-queu"), IFD_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "--max-queu"));
    ck_assert_int_eq(parse(&c, &cli, err, 2, "--workers", "many"), IFD_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "workers"));
    ck_assert_int_eq(parse(&c, &cli, err, 2, "--workers", "1000"), IFD_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "range"));
    ck_assert_int_eq(parse(&c, &cli, err, 2, "--kv-budget", "12Q"), IFD_EINVAL);
    ck_assert_int_eq(parse(&c, &cli, err, 1, "--workers"), IFD_EINVAL);
    ck_assert_int_eq(parse(&c, &cli, err, 1, "stray"), IFD_EINVAL);
}
END_TEST

START_TEST(test_inspect_flag)
{
    ifd_config_t c;
    ifd_config_cli_t cli;
    char err[512] = "";
    /* no --model needed; --json only with --inspect; both spellings of the value */
    ck_assert_int_eq(parse(&c, &cli, err, 2, "--inspect", "dir/m"), 0);
    ck_assert_str_eq(cli.inspect, "dir/m");
    ck_assert(!cli.json);
    ifd_config_free(&c);
    ifd_config_cli_free(&cli);
    ck_assert_int_eq(parse(&c, &cli, err, 2, "--json", "--inspect=x.gguf"), 0);
    ck_assert_str_eq(cli.inspect, "x.gguf");
    ck_assert(cli.json);
    ifd_config_free(&c);
    ifd_config_cli_free(&cli);
    ck_assert_int_eq(parse(&c, &cli, err, 1, "--inspect"), IFD_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "--inspect"));
    ck_assert_int_eq(parse(&c, &cli, err, 1, "--inspect="), IFD_EINVAL);
    ck_assert_int_eq(parse(&c, &cli, err, 3, "--model", "m.gguf", "--json"), IFD_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "--json"));
    /* --config keeps working beside it */
    ck_assert_int_eq(parse(&c, &cli, err, 1, "--config"), IFD_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "--config"));
}
END_TEST

START_TEST(test_gpu_settings)
{
    ifd_config_t c;
    ifd_config_cli_t cli;
    char err[512] = "";
    ck_assert_int_eq(parse(&c, &cli, err, 0), 0);
    ck_assert(c.gpu_memory_fraction > 0.8999 && c.gpu_memory_fraction < 0.9001);
    ck_assert_str_eq(c.gpu_dtype, "bf16");
    ck_assert_int_eq(c.weights_seed, 0);
    ifd_config_free(&c);
    ifd_config_cli_free(&cli);
    ck_assert_int_eq(parse(&c, &cli, err, 6, "--gpu-memory-fraction=0.5", "--gpus", "1,0",
                           "--weights-seed", "42", "--random-weights=s.json"),
                     0);
    ck_assert(c.gpu_memory_fraction == 0.5);
    ck_assert_str_eq(c.gpus, "1,0");
    ck_assert_int_eq(c.weights_seed, 42);
    ck_assert_str_eq(c.random_weights, "s.json");
    ifd_config_free(&c);
    ifd_config_cli_free(&cli);
    ck_assert_int_eq(parse(&c, &cli, err, 2, "--gpu-memory-fraction", "1.5"), IFD_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "range"));
    ck_assert_int_eq(parse(&c, &cli, err, 2, "--gpu-memory-fraction", "90%"), IFD_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "number"));
    ck_assert_int_eq(parse(&c, &cli, err, 2, "--weights-seed", "-1"), IFD_EINVAL);
    const char *path = write_tmp("{\"gpu_memory_fraction\": 0.25, \"gpus\": [0, 2]}");
    ck_assert_int_eq(parse(&c, &cli, err, 2, "--config", path), 0);
    ck_assert(c.gpu_memory_fraction == 0.25);
    ck_assert_str_eq(c.gpus, "0,2");
    ifd_config_free(&c);
    ifd_config_cli_free(&cli);
    path = write_tmp("{\"gpu_memory_fraction\": \"most\"}");
    ck_assert_int_eq(parse(&c, &cli, err, 2, "--config", path), IFD_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "gpu_memory_fraction"));
    unlink(path);

    int ids[IFD_GPU_MAX], n = -1;
    ck_assert_int_eq(ifd_gpu_parse_list("0", ids, IFD_GPU_MAX, &n, err, sizeof err), 0);
    ck_assert_int_eq(n, 1);
    ck_assert_int_eq(ids[0], 0);
    ck_assert_int_eq(ifd_gpu_parse_list("3, 1,2", ids, IFD_GPU_MAX, &n, err, sizeof err), 0);
    ck_assert_int_eq(n, 3);
    ck_assert(ids[0] == 3 && ids[1] == 1 && ids[2] == 2);
    const char *bad[] = {"", ",", "0,", "0,,1", "a", "0,x", "-1", "1024", "0,0", "1 2",
                         "99999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        ck_assert_msg(ifd_gpu_parse_list(bad[i], ids, IFD_GPU_MAX, &n, err, sizeof err) ==
                          IFD_EINVAL,
                      "'%s' accepted", bad[i]);
        ck_assert_msg(err[0] != '\0', "no message for '%s'", bad[i]);
    }
    ck_assert_int_eq(ifd_gpu_parse_list("0,1,2", ids, 2, &n, err, sizeof err), IFD_EINVAL);
}
END_TEST

/* mmproj (docs/configuration.md): a path, empty by default, from a flag or the file. */
START_TEST(test_mmproj_key)
{
    ifd_config_t c;
    ifd_config_cli_t cli;
    char err[512] = "";
    ck_assert_int_eq(parse(&c, &cli, err, 0), 0);
    ck_assert_str_eq(c.mmproj, "");
    ck_assert_int_eq(c.image_cache_mb, 256);
    ck_assert_int_eq(c.vision_step_ms, 50);
    ifd_config_free(&c);
    ifd_config_cli_free(&cli);
    ck_assert_int_eq(parse(&c, &cli, err, 6, "--mmproj", "/m/mmproj-f16.gguf", "--image-cache-mb",
                           "64", "--vision-step-ms", "20"),
                     0);
    ck_assert_str_eq(c.mmproj, "/m/mmproj-f16.gguf");
    ck_assert_int_eq(c.image_cache_mb, 64);
    ck_assert_int_eq(c.vision_step_ms, 20);
    ifd_config_free(&c);
    ifd_config_cli_free(&cli);
    ck_assert_int_eq(parse(&c, &cli, err, 2, "--vision-step-ms", "0"), IFD_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "range"));
    const char *path = write_tmp("{\"mmproj\": \"vision.gguf\"}");
    ck_assert_int_eq(parse(&c, &cli, err, 2, "--config", path), 0);
    ck_assert_str_eq(c.mmproj, "vision.gguf");
    ifd_config_free(&c);
    ifd_config_cli_free(&cli);
    unlink(path);
    ck_assert_int_eq(parse(&c, &cli, err, 2, "--image-cache-mb", "0"), IFD_EINVAL);
    path = write_tmp("{\"mmproj\": 3}");
    ck_assert_int_eq(parse(&c, &cli, err, 2, "--config", path), IFD_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "mmproj"));
    unlink(path);
}
END_TEST

/* draft_step_tokens (docs/configuration.md, docs/speculative.md): 0 (the step
 * budget) by default, a count from a flag or the file, never negative or past
 * 2^20; a string is refused naming the key. (Without draft_model a value
 * above 0 stops the start: daemon/main.c, test_daemon_spec.) */
START_TEST(test_draft_step_tokens_key)
{
    ifd_config_t c;
    ifd_config_cli_t cli;
    char err[512] = "";
    ck_assert_int_eq(parse(&c, &cli, err, 0), 0);
    ck_assert_int_eq(c.draft_step_tokens, 0);
    ifd_config_free(&c);
    ifd_config_cli_free(&cli);
    ck_assert_int_eq(
        parse(&c, &cli, err, 4, "--draft-model", "d.gguf", "--draft-step-tokens", "16"), 0);
    ck_assert_int_eq(c.draft_step_tokens, 16);
    ck_assert_str_eq(c.draft_model, "d.gguf");
    ifd_config_free(&c);
    ifd_config_cli_free(&cli);
    ck_assert_int_eq(parse(&c, &cli, err, 1, "--draft-step-tokens=1048576"), 0);
    ck_assert_int_eq(c.draft_step_tokens, 1 << 20);
    ifd_config_free(&c);
    ifd_config_cli_free(&cli);
    const char *bad[] = {"-1", "1048577", "lots", "8.5"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        err[0] = '\0';
        ck_assert_msg(parse(&c, &cli, err, 2, "--draft-step-tokens", bad[i]) == IFD_EINVAL,
                      "'%s' accepted", bad[i]);
        ck_assert_msg(strstr(err, "draft_step_tokens") || strstr(err, "draft-step-tokens"),
                      "'%s': %s", bad[i], err);
    }
    const char *path = write_tmp("{\"draft_step_tokens\": 24}");
    ck_assert_int_eq(parse(&c, &cli, err, 2, "--config", path), 0);
    ck_assert_int_eq(c.draft_step_tokens, 24);
    ifd_config_free(&c);
    ifd_config_cli_free(&cli);
    unlink(path);
    path = write_tmp("{\"draft_step_tokens\": \"24\"}");
    ck_assert_int_eq(parse(&c, &cli, err, 2, "--config", path), IFD_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "draft_step_tokens"));
    unlink(path);
}
END_TEST

/* allow_image_urls, image_url_timeout and image_url_max_redirects (docs/configuration.md):
 * off, 10 s and 3 by default. */
START_TEST(test_image_url_keys)
{
    ifd_config_t c;
    ifd_config_cli_t cli;
    char err[512] = "";
    ck_assert_int_eq(parse(&c, &cli, err, 0), 0);
    ck_assert_str_eq(c.allow_image_urls, "");
    ck_assert(c.image_url_timeout == 10.0);
    ck_assert_int_eq(c.image_url_max_redirects, 3);
    ifd_config_free(&c);
    ifd_config_cli_free(&cli);
    ck_assert_int_eq(parse(&c, &cli, err, 6, "--allow-image-urls", "a.com,*.b.org",
                           "--image-url-timeout", "250ms", "--image-url-max-redirects", "0"),
                     0);
    ck_assert_str_eq(c.allow_image_urls, "a.com,*.b.org");
    ck_assert(c.image_url_timeout == 0.25);
    ck_assert_int_eq(c.image_url_max_redirects, 0);
    ifd_config_free(&c);
    ifd_config_cli_free(&cli);
    ck_assert_int_eq(parse(&c, &cli, err, 2, "--image-url-timeout", "0"), IFD_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "image_url_timeout"));
    ck_assert_int_eq(parse(&c, &cli, err, 2, "--image-url-max-redirects", "21"), IFD_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "image_url_max_redirects"));
}
END_TEST

/* kv_cache_pin_slots (docs/configuration.md): 32 by default, 0..64, from a flag or the file;
 * a bad value is a start-up error naming the key. */
START_TEST(test_kv_cache_pin_slots)
{
    ifd_config_t c;
    ifd_config_cli_t cli;
    char err[512] = "";
    ck_assert_int_eq(parse(&c, &cli, err, 0), 0);
    ck_assert_int_eq(c.kv_cache_pin_slots, 32);
    ifd_config_free(&c);
    ifd_config_cli_free(&cli);
    ck_assert_int_eq(parse(&c, &cli, err, 2, "--kv-cache-pin-slots", "2"), 0);
    ck_assert_int_eq(c.kv_cache_pin_slots, 2);
    ifd_config_free(&c);
    ifd_config_cli_free(&cli);
    ck_assert_int_eq(parse(&c, &cli, err, 1, "--kv-cache-pin-slots=0"), 0);
    ck_assert_int_eq(c.kv_cache_pin_slots, 0); /* synchronous copies */
    ifd_config_free(&c);
    ifd_config_cli_free(&cli);
    const char *path = write_tmp("{\"kv_cache_pin_slots\": 64}");
    ck_assert_int_eq(parse(&c, &cli, err, 2, "--config", path), 0);
    ck_assert_int_eq(c.kv_cache_pin_slots, 64);
    ifd_config_free(&c);
    ifd_config_cli_free(&cli);
    unlink(path);
    const char *bad[] = {"65", "-1", "many", "8k"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        err[0] = 0;
        ck_assert_int_eq(parse(&c, &cli, err, 2, "--kv-cache-pin-slots", bad[i]), IFD_EINVAL);
        ck_assert_ptr_nonnull(strstr(err, "kv_cache_pin_slots"));
    }
    path = write_tmp("{\"kv_cache_pin_slots\": \"32\"}");
    ck_assert_int_eq(parse(&c, &cli, err, 2, "--config", path), IFD_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "kv_cache_pin_slots"));
    unlink(path);
    path = write_tmp("{\"kv_cache_pin_slots\": 5000}");
    ck_assert_int_eq(parse(&c, &cli, err, 2, "--config", path), IFD_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "kv_cache_pin_slots"));
    unlink(path);
}
END_TEST

START_TEST(test_file_precedence_and_errors)
{
    ifd_config_t c;
    ifd_config_cli_t cli;
    char err[512] = "";
    char *p = write_tmp("{\"max_queue\": 9, \"workers\": 2, \"gpus\": [0, 1], "
                        "\"kv_budget\": \"2G\", \"log_level\": \"debug\"}");
    char path[64];
    snprintf(path, sizeof path, "%s", p);
    ck_assert_int_eq(parse(&c, &cli, err, 4, "--config", path, "--workers", "3"), 0);
    ck_assert_int_eq(c.max_queue, 9);
    ck_assert_int_eq(c.workers, 3); /* the flag wins */
    ck_assert_str_eq(c.gpus, "0,1");
    ck_assert_uint_eq(c.kv_budget, 2ull << 30);

    /* reload: the file changes; flags still win; only reloadable keys apply */
    FILE *f = fopen(path, "w");
    fputs("{\"max_queue\": 11, \"workers\": 5, \"block_size\": 32, \"log_level\": \"warn\"}", f);
    fclose(f);
    ifd_config_t next;
    ck_assert_int_eq(ifd_config_reload(&next, &cli, err, sizeof err), 0);
    ck_assert_int_eq(next.workers, 3);
    ck_assert_int_eq(next.block_size, 32);
    int changed = ifd_config_apply_reloadable(&c, &next);
    ck_assert_int_eq(changed, 2); /* max_queue, log_level */
    ck_assert_int_eq(c.max_queue, 11);
    ck_assert_str_eq(c.log_level, "warn");
    ck_assert_int_eq(c.block_size, 16); /* needs a restart */
    ifd_config_free(&next);
    ifd_config_free(&c);
    ifd_config_cli_free(&cli);

    const char *bad[] = {"{\"max_queeu\": 1}",    "{\"max_queue\": \"x\"}",    "[1]", "{\"a\":",
                         "{\"prefix_cache\": 1}", "{\"header_timeout\": true}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        f = fopen(path, "w");
        fputs(bad[i], f);
        fclose(f);
        err[0] = '\0';
        ck_assert_msg(parse(&c, &cli, err, 2, "--config", path) == IFD_EINVAL, "%s", bad[i]);
        ck_assert_msg(err[0], "no message for %s", bad[i]);
    }
    unlink(path);
}
END_TEST

START_TEST(test_metrics_render)
{
    ifd_metrics_t m;
    ifd_metrics_init(&m);
    ifd_metrics_count_status(&m, 200);
    ifd_metrics_count_status(&m, 200);
    ifd_metrics_count_status(&m, 503);
    ifd_hist_observe(&m.ttft, 0.003);
    ifd_hist_observe(&m.ttft, 100.0);
    m.finished[IFD_FIN_STOP] = 4;
    ifd_metrics_gauges_t g;
    memset(&g, 0, sizeof g);
    g.kv_total = 10;
    g.kv_used = 3;
    ifd_buf_t b = IFD_BUF_INIT;
    ck_assert_int_eq(ifd_metrics_render(&m, &g, "model", &b), 0);
    ck_assert_ptr_nonnull(strstr(b.data, "inferd_http_requests_total{code=\"200\"} 2\n"));
    ck_assert_ptr_nonnull(strstr(b.data, "inferd_http_requests_total{code=\"503\"} 1\n"));
    ck_assert_ptr_nonnull(strstr(b.data, "inferd_request_success_total{finish_reason=\"stop\"} 4"));
    const char *tt = "inferd_time_to_first_token_seconds_bucket";
    char want[128];
    snprintf(want, sizeof want, "%s{le=\"0.005\"} 1\n", tt);
    ck_assert_ptr_nonnull(strstr(b.data, want));
    snprintf(want, sizeof want, "%s{le=\"+Inf\"} 2\n", tt);
    ck_assert_ptr_nonnull(strstr(b.data, want));
    ck_assert_ptr_nonnull(strstr(b.data, "inferd_time_to_first_token_seconds_count 2"));
    ck_assert_ptr_nonnull(strstr(b.data, "inferd_kv_blocks{state=\"used\"} 3"));
    ck_assert_ptr_nonnull(strstr(b.data, "inferd_kv_cache_usage_ratio 0.300000"));
    ck_assert_ptr_nonnull(strstr(b.data, "# TYPE inferd_queue_depth gauge"));
    ifd_buf_free(&b);
}
END_TEST

/* vLLM's names with a model_name label; no gauge named *_total and no
 * family whose name is another counter family's name minus "_total"
 * (OpenMetrics parsers read inferd_x_total as a sample of family inferd_x). */
START_TEST(test_metrics_vllm_and_families)
{
    ifd_metrics_t m;
    ifd_metrics_init(&m);
    m.prompt_tokens = 7;
    m.generation_tokens = 20;
    m.finished[IFD_FIN_ABORT] = 1;
    ifd_metrics_itl(&m, 0.02);
    ifd_metrics_gauges_t g;
    memset(&g, 0, sizeof g);
    g.kv_total = 8;
    g.kv_used = 2;
    g.seqs_running = 3;
    g.queue_depth = 4;
    g.kv_block_size = 16;
    g.kv_dtype = "f16";
    g.prefix_cache = true;
    ifd_buf_t b = IFD_BUF_INIT;
    ck_assert_int_eq(ifd_metrics_render(&m, &g, "my \"model\"", &b), 0);
    const char *want[] = {
        "vllm:num_requests_running{model_name=\"my \\\"model\\\"\"} 3\n",
        "vllm:num_requests_waiting{model_name=\"my \\\"model\\\"\"} 4\n",
        "vllm:kv_cache_usage_perc{model_name=\"my \\\"model\\\"\"} 0.250000\n",
        "vllm:prompt_tokens_total{model_name=\"my \\\"model\\\"\"} 7\n",
        "vllm:generation_tokens_total{model_name=\"my \\\"model\\\"\"} 20\n",
        "vllm:request_success_total{model_name=\"my \\\"model\\\"\",finished_reason=\"abort\"} 1\n",
        "vllm:time_per_output_token_seconds_count{model_name=\"my \\\"model\\\"\"} 1\n",
        "vllm:time_to_first_token_seconds_bucket{model_name=\"my \\\"model\\\"\",le=\"+Inf\"} 0\n",
        "vllm:e2e_request_latency_seconds_sum{model_name=",
        "vllm:cache_config_info{model_name=\"my \\\"model\\\"\",block_size=\"16\",cache_dtype=\"f16\","
        "num_gpu_blocks=\"8\",enable_prefix_caching=\"True\"} 1\n",
        "# TYPE vllm:prompt_tokens_total counter\n",
        "# TYPE vllm:num_requests_running gauge\n",
        "inferd_connections_open ",
        "inferd_kv_blocks_capacity 8\n",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        ck_assert_msg(strstr(b.data, want[i]), "missing: %s", want[i]);
    /* the families */
    char names[128][96], types[128][16];
    int n = 0;
    for (const char *p = b.data; (p = strstr(p, "# TYPE ")) != NULL; p++) {
        ck_assert_int_lt(n, 128);
        ck_assert_int_eq(sscanf(p, "# TYPE %95s %15s", names[n], types[n]), 2);
        n++;
    }
    ck_assert_int_gt(n, 40);
    for (int i = 0; i < n; i++) {
        size_t l = strlen(names[i]);
        /* vLLM's own name for a histogram, kept so its dashboards find it */
        if (!strcmp(names[i], "vllm:iteration_tokens_total"))
            continue;
        bool total = l > 6 && !strcmp(names[i] + l - 6, "_total");
        ck_assert_msg(!total || !strcmp(types[i], "counter"), "%s is a %s", names[i], types[i]);
        for (int j = 0; j < n; j++) {
            ck_assert_msg(i == j || strcmp(names[i], names[j]), "%s twice", names[i]);
            if (total && strlen(names[j]) == l - 6 && !strncmp(names[i], names[j], l - 6))
                ck_abort_msg("families %s and %s collide", names[i], names[j]);
        }
    }
    ifd_buf_free(&b);
}
END_TEST

/* vLLM's per-request histograms: its buckets and bound text (floatToGoString),
 * the 1-2-5 token buckets up to max_model_len, and one sequence's timeline
 * split into queue / prefill / decode / inference. */
START_TEST(test_metrics_vllm_requests)
{
    ifd_metrics_t m;
    ifd_metrics_init(&m);
    ifd_metrics_set_max_model_len(&m, 2000000);
    ck_assert_int_eq(m.v_prompt_tokens.n_bounds, 20); /* 1, 2, 5, …, 1e6, 2e6 */
    ifd_metrics_set_max_model_len(&m, 8192);
    ck_assert_int_eq(m.v_prompt_tokens.n_bounds, 12); /* …, 2000, 5000 */
    const uint64_t s = 1000000000ull;
    /* arrival 1 s, dispatch 1.5 s, first token 2.5 s, last 4.5 s, end 4.6 s: 5 tokens */
    ifd_metrics_seq_t q = {.arrival_ns = 1 * s,
                           .scheduled_ns = 1 * s + s / 2,
                           .first_token_ns = 2 * s + s / 2,
                           .last_token_ns = 4 * s + s / 2,
                           .end_ns = 4 * s + 6 * s / 10,
                           .prompt_tokens = 300,
                           .generation_tokens = 5,
                           .max_tokens = 16};
    ifd_metrics_seq_done(&m, &q);
    ifd_metrics_request_done(&m, 3, 5);
    ifd_metrics_ttft(&m, 0.0005);
    ck_assert_uint_eq(m.ttft.count, 1);
    ck_assert_double_eq_tol(m.v_queue.sum, 0.5, 1e-9);
    ck_assert_double_eq_tol(m.v_prefill.sum, 1.0, 1e-9);
    ck_assert_double_eq_tol(m.v_decode.sum, 2.0, 1e-9);
    ck_assert_double_eq_tol(m.v_inference.sum, 3.0, 1e-9);
    ck_assert_double_eq_tol(m.v_e2e.sum, 3.6, 1e-9);
    ck_assert_double_eq_tol(m.v_tpot.sum, 0.5, 1e-9);
    ifd_metrics_gauges_t g;
    memset(&g, 0, sizeof g);
    g.step_tokens[0] = 3;  /* 3 steps of 1 token */
    g.step_tokens[2] = 2;  /* 2 of 9..16 */
    g.step_tokens[12] = 1; /* 1 above 8096 */
    g.step_tokens_sum = 3 + 2 * 12 + 9000;
    ifd_buf_t b = IFD_BUF_INIT;
    ck_assert_int_eq(ifd_metrics_render(&m, &g, "m", &b), 0);
    const char *want[] = {
        "# TYPE vllm:iteration_tokens_total histogram\n",
        "vllm:iteration_tokens_total_bucket{model_name=\"m\",le=\"1.0\"} 3\n",
        "vllm:iteration_tokens_total_bucket{model_name=\"m\",le=\"8.0\"} 3\n",
        "vllm:iteration_tokens_total_bucket{model_name=\"m\",le=\"16.0\"} 5\n",
        "vllm:iteration_tokens_total_bucket{model_name=\"m\",le=\"8096.0\"} 5\n",
        "vllm:iteration_tokens_total_bucket{model_name=\"m\",le=\"+Inf\"} 6\n",
        "vllm:iteration_tokens_total_sum{model_name=\"m\"} 9027\n",
        "vllm:iteration_tokens_total_count{model_name=\"m\"} 6\n",
        "vllm:time_to_first_token_seconds_bucket{model_name=\"m\",le=\"0.001\"} 1\n",
        "vllm:time_to_first_token_seconds_bucket{model_name=\"m\",le=\"2560.0\"} 1\n",
        "vllm:inter_token_latency_seconds_bucket{model_name=\"m\",le=\"80.0\"} 0\n",
        "vllm:e2e_request_latency_seconds_bucket{model_name=\"m\",le=\"2.5\"} 0\n",
        "vllm:e2e_request_latency_seconds_bucket{model_name=\"m\",le=\"5.0\"} 1\n",
        "vllm:e2e_request_latency_seconds_bucket{model_name=\"m\",le=\"7680.0\"} 1\n",
        "vllm:request_queue_time_seconds_bucket{model_name=\"m\",le=\"0.5\"} 1\n",
        "vllm:request_prefill_time_seconds_bucket{model_name=\"m\",le=\"0.8\"} 0\n",
        "vllm:request_prefill_time_seconds_bucket{model_name=\"m\",le=\"1.0\"} 1\n",
        "vllm:request_decode_time_seconds_sum{model_name=\"m\"} 2.000000\n",
        "vllm:request_inference_time_seconds_count{model_name=\"m\"} 1\n",
        "vllm:request_time_per_output_token_seconds_bucket{model_name=\"m\",le=\"0.5\"} 1\n",
        "vllm:request_prompt_tokens_bucket{model_name=\"m\",le=\"200.0\"} 0\n",
        "vllm:request_prompt_tokens_bucket{model_name=\"m\",le=\"500.0\"} 1\n",
        "vllm:request_prompt_tokens_bucket{model_name=\"m\",le=\"5000.0\"} 1\n",
        "vllm:request_generation_tokens_sum{model_name=\"m\"} 5.000000\n",
        "vllm:request_params_max_tokens_bucket{model_name=\"m\",le=\"10.0\"} 0\n",
        "vllm:request_params_max_tokens_bucket{model_name=\"m\",le=\"20.0\"} 1\n",
        "vllm:request_params_n_bucket{model_name=\"m\",le=\"2.0\"} 0\n",
        "vllm:request_params_n_bucket{model_name=\"m\",le=\"5.0\"} 1\n",
        "vllm:request_max_num_generation_tokens_bucket{model_name=\"m\",le=\"5.0\"} 1\n",
        "# TYPE vllm:request_prompt_tokens histogram\n",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        ck_assert_msg(strstr(b.data, want[i]), "missing: %s", want[i]);
    ck_assert_ptr_null(strstr(b.data, "le=\"10000.0\"")); /* beyond max_model_len */
    ifd_buf_free(&b);
    /* Go's exponent from seven digits on, as prometheus_client writes it */
    ifd_metrics_set_max_model_len(&m, 2500000);
    ck_assert_int_eq(ifd_metrics_render(&m, &g, "m", &b), 0);
    const char *tok = "vllm:request_prompt_tokens_bucket{model_name=\"m\",le=";
    char line[128];
    snprintf(line, sizeof line, "%s\"500000.0\"}", tok);
    ck_assert_ptr_nonnull(strstr(b.data, line));
    snprintf(line, sizeof line, "%s\"2e+06\"}", tok);
    ck_assert_ptr_nonnull(strstr(b.data, line));
    ifd_buf_free(&b);
}
END_TEST

/* The draft model's pool's tiers (docs/speculative.md, "The draft's tiers"):
 * a twin inferd_draft_kv_* family of every inferd_kv_* tier family, each
 * once, read from draft_kv_tier and never from the model's kv_tier; none
 * without a draft model. */
START_TEST(test_metrics_draft_tiers)
{
    ifd_metrics_t m;
    ifd_metrics_init(&m);
    ifd_metrics_gauges_t g;
    memset(&g, 0, sizeof g);
    for (int c = 0; c < IFD_KVTIER_COUNT; c++) {
        g.kv_tier[c] = 1000 + (uint64_t)c;
        g.draft_kv_tier[c] = 2000 + (uint64_t)c;
    }
    ifd_buf_t b = IFD_BUF_INIT;
    ck_assert_int_eq(ifd_metrics_render(&m, &g, "m", &b), 0);
    ck_assert_ptr_null(strstr(b.data, "inferd_draft_"));
    ifd_buf_free(&b);
    g.draft_tiers = true;
    ck_assert_int_eq(ifd_metrics_render(&m, &g, "m", &b), 0);
    char want[160];
    snprintf(want, sizeof want, "inferd_kv_disk_writes_total %d\n", 1000 + IFD_KVTIER_WRITES);
    ck_assert_msg(strstr(b.data, want), "missing: %s", want);
    snprintf(want, sizeof want, "inferd_draft_kv_disk_writes_total %d\n",
             2000 + IFD_KVTIER_WRITES);
    ck_assert_msg(strstr(b.data, want), "missing: %s", want);
    snprintf(want, sizeof want, "inferd_draft_kv_host_hits_total %d\n",
             2000 + IFD_KVTIER_HOST_HIT_TOKENS);
    ck_assert_msg(strstr(b.data, want), "missing: %s", want);
    snprintf(want, sizeof want, "inferd_draft_kv_disk_bytes %d\n", 2000 + IFD_KVTIER_DISK_BYTES);
    ck_assert_msg(strstr(b.data, want), "missing: %s", want);
    ck_assert_ptr_nonnull(strstr(b.data, "# TYPE inferd_draft_kv_host_bytes gauge\n"));
    ck_assert_ptr_nonnull(strstr(b.data, "# TYPE inferd_draft_kv_host_misses_total counter\n"));
    ck_assert_ptr_nonnull(strstr(b.data, "# HELP inferd_draft_kv_disk_hits_total The draft "));
    /* one draft family per model tier family, each of its own counter */
    int n_kv = 0, n_draft = 0;
    for (const char *p = b.data; (p = strstr(p, "# TYPE ")) != NULL; p++) {
        char name[96];
        ck_assert_int_eq(sscanf(p, "# TYPE %95s", name), 1);
        if (!strncmp(name, "inferd_kv_disk_", 15) || !strncmp(name, "inferd_kv_host_", 15))
            n_kv++;
        if (!strncmp(name, "inferd_draft_", 13)) {
            n_draft++;
            char line[128];
            snprintf(line, sizeof line, "\n%s ", name);
            const char *at = strstr(b.data, line);
            ck_assert_msg(at, "no sample of %s", name);
            unsigned long long v = strtoull(at + strlen(line), NULL, 10);
            ck_assert_msg(v >= 2000 && v < 2000 + IFD_KVTIER_COUNT, "%s %llu", name, v);
            ck_assert_ptr_null(strstr(at + 1, line)); /* once */
        }
    }
    ck_assert_int_eq(n_kv, IFD_KVTIER_COUNT);
    ck_assert_int_eq(n_draft, IFD_KVTIER_COUNT);
    ifd_buf_free(&b);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("daemon_config");
    ifd_test_case(s, "config", 30,
                  IFD_TESTS(test_defaults_and_flags, test_bad_flags, test_inspect_flag,
                            test_gpu_settings, test_mmproj_key, test_draft_step_tokens_key,
                            test_image_url_keys, test_kv_cache_pin_slots,
                            test_file_precedence_and_errors,
                            test_metrics_render,
                            test_metrics_vllm_and_families, test_metrics_vllm_requests,
                            test_metrics_draft_tiers));
    return ifd_test_run(s);
}
