/*
 * test_client_stats.c — the benchmark's arithmetic and outputs: percentiles
 * by linear interpolation checked against NumPy's values for the same
 * samples (written out below), mean and population std; the Prometheus
 * reader (client/prom.h) on labels, escapes, special values, comments and
 * malformed lines; and the SVG plot (client/plot.h) is well-formed, one
 * polyline per series, text escaped, bad input refused.
 */
#include "testutil.h"

#include "client/plot.h"
#include "client/prom.h"
#include "client/stats.h"
#include "error.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NEAR(a, b) ck_assert_msg(fabs((a) - (b)) < 1e-9, "%.12g != %.12g", (double)(a), (double)(b))

START_TEST(test_stats)
{
    /* np.percentile([7, 1, 3, 9, 4], [50, 90, 99]) = [4, 8.2, 8.92] */
    double v[] = {7, 1, 3, 9, 4};
    ifd_cli_stats_t s;
    ck_assert_int_eq(ifd_cli_stats_summary(v, 5, &s), 0);
    ck_assert_uint_eq(s.n, 5);
    NEAR(s.mean, 4.8);
    NEAR(s.std, sqrt(((7 - 4.8) * (7 - 4.8) + 3.8 * 3.8 + 1.8 * 1.8 + 4.2 * 4.2 + 0.64) / 5));
    NEAR(s.p50, 4);
    NEAR(s.p90, 8.2);
    NEAR(s.p99, 8.92);
    NEAR(s.min, 1);
    NEAR(s.max, 9);
    ck_assert(v[0] == 7 && v[4] == 4); /* input untouched */

    /* np.percentile(range(1, 101), 99) = 99.01 */
    double r[100];
    for (int i = 0; i < 100; i++)
        r[i] = i + 1;
    ck_assert_int_eq(ifd_cli_stats_summary(r, 100, &s), 0);
    NEAR(s.p99, 99.01);
    NEAR(s.p50, 50.5);
    NEAR(s.p90, 90.1);

    double one = 3.5;
    ck_assert_int_eq(ifd_cli_stats_summary(&one, 1, &s), 0);
    NEAR(s.p99, 3.5);
    NEAR(s.std, 0);
    ck_assert_int_eq(ifd_cli_stats_summary(NULL, 0, &s), 0);
    ck_assert_uint_eq(s.n, 0);
}
END_TEST

START_TEST(test_prom)
{
    const char *text = "# HELP inferd_kv_blocks KV blocks\n"
                       "# TYPE inferd_kv_blocks gauge\n"
                       "inferd_kv_blocks{state=\"free\"} 1000\n"
                       "inferd_kv_blocks{state=\"used\"} 24\r\n"
                       "inferd_kv_blocks{state=\"cached\",dev=\"0\"} 7 1700000000\n"
                       "  inferd_uptime_seconds 12.5\n"
                       "\n"
                       "inferd_info{version=\"0.1.0\",model=\"a \\\"b\\\" \\\\c\"} 1\n"
                       "x_bucket{le=\"+Inf\"} +Inf\n"
                       "nan_metric NaN\n"
                       "bad{state=\"x} 1\n"
                       "9bad 1\n"
                       "novalue\n";
    ifd_cli_prom_t p;
    size_t bad = 0;
    ck_assert_int_eq(ifd_cli_prom_parse(&p, text, strlen(text), &bad), 0);
    ck_assert_uint_eq(bad, 3);
    ck_assert_uint_eq(p.n, 7);
    bool found;
    NEAR(ifd_cli_prom_sum(&p, "inferd_kv_blocks", "state", "free", &found), 1000);
    ck_assert(found);
    NEAR(ifd_cli_prom_sum(&p, "inferd_kv_blocks", "state", "used", NULL), 24);
    NEAR(ifd_cli_prom_sum(&p, "inferd_kv_blocks", NULL, NULL, NULL), 1031);
    NEAR(ifd_cli_prom_sum(&p, "inferd_uptime_seconds", NULL, NULL, NULL), 12.5);
    ifd_cli_prom_sum(&p, "inferd_kv_blocks", "state", "gone", &found);
    ck_assert(!found);
    ifd_cli_prom_sum(&p, "missing", NULL, NULL, &found);
    ck_assert(!found);
    const ifd_cli_prom_sample_t *info = NULL;
    for (size_t i = 0; i < p.n; i++)
        if (strcmp(p.s[i].name, "inferd_info") == 0)
            info = &p.s[i];
    ck_assert_ptr_nonnull(info);
    ck_assert_str_eq(ifd_cli_prom_label(info, "model"), "a \"b\" \\c");
    ck_assert_str_eq(ifd_cli_prom_label(info, "version"), "0.1.0");
    ck_assert_ptr_null(ifd_cli_prom_label(info, "mode"));
    ck_assert(isinf(ifd_cli_prom_sum(&p, "x_bucket", "le", "+Inf", NULL)));
    ck_assert(isnan(ifd_cli_prom_sum(&p, "nan_metric", NULL, NULL, NULL)));
    ifd_cli_prom_free(&p);
    ck_assert_int_eq(ifd_cli_prom_parse(&p, "", 0, NULL), 0);
    ck_assert_uint_eq(p.n, 0);
    ifd_cli_prom_free(&p);
}
END_TEST

static size_t count(const char *hay, const char *needle)
{
    size_t n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p++)
        n++;
    return n;
}

START_TEST(test_plot)
{
    double x[] = {1, 4, 16, 64};
    double tput[] = {100, 350, 900, 1200};
    double a[] = {20, 35, NAN, 400}, b[] = {5, 6, 9, 30};
    ifd_cli_plot_series_t s1[] = {{"tokens/s <&>", tput}};
    ifd_cli_plot_series_t s2[] = {{"p99 TTFT", a}, {"p99 TPOT", b}};
    ifd_cli_plot_panel_t panels[] = {{"Throughput", "tok/s", false, s1, 1},
                                     {"Latency", "ms", true, s2, 2}};
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    ck_assert_int_eq(ifd_cli_plot_svg(f, "T \"q\"", "concurrency", x, 4, true, panels, 2), 0);
    fclose(f);
    ck_assert_ptr_nonnull(strstr(buf, "<svg xmlns=\"http://www.w3.org/2000/svg\""));
    ck_assert_ptr_nonnull(strstr(buf, "</svg>\n"));
    ck_assert_uint_eq(count(buf, "<polyline"), 3);
    ck_assert_uint_eq(count(buf, "<circle"), 4 + 3 + 4); /* the NaN point is skipped */
    ck_assert_ptr_nonnull(strstr(buf, "tokens/s &lt;&amp;&gt;"));
    ck_assert_ptr_nonnull(strstr(buf, "T &quot;q&quot;"));
    ck_assert_ptr_null(strstr(buf, "nan"));
    ck_assert_ptr_null(strstr(buf, "inf"));
    free(buf);

    f = open_memstream(&buf, &len);
    ck_assert_int_eq(ifd_cli_plot_svg(f, "t", "x", x, 0, false, panels, 2), IFD_EINVAL);
    double bad[] = {0, 1};
    ck_assert_int_eq(ifd_cli_plot_svg(f, "t", "x", bad, 2, true, panels, 1), IFD_EINVAL);
    /* one point, linear x */
    ck_assert_int_eq(ifd_cli_plot_svg(f, "t", "x", x, 1, false, panels, 1), 0);
    fclose(f);
    ck_assert_ptr_null(strstr(buf, "nan"));
    free(buf);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("client_stats");
    ifd_test_case(s, "stats", 0, IFD_TESTS(test_stats, test_prom, test_plot));
    return ifd_test_run(s);
}
