/*
 * prom.h — a reader for the Prometheus text exposition format (what the
 * daemon's GET /metrics returns), enough for `infer status` and the
 * benchmarks: samples "name{label="value",…} number [timestamp]", comments
 * and blank lines skipped, label values unescaped (\\, \", \n).
 *
 * A parsed set owns copies of all its strings (ifd_cli_prom_free). Lookups are
 * linear: a scrape holds a few hundred samples. Not thread-safe; plain data.
 */
#ifndef IFD_CLIENT_PROM_H
#define IFD_CLIENT_PROM_H

#include <stdbool.h>
#include <stddef.h>

typedef struct {
    char *name;
    char *labels; /* "k=v\0k=v\0…\0" pairs, unescaped; NULL when none */
    size_t n_labels;
    double value;
} ifd_cli_prom_sample_t;

typedef struct {
    ifd_cli_prom_sample_t *s;
    size_t n;
} ifd_cli_prom_t;

/* Parses text (len bytes). Malformed lines are skipped (counted in
 * *bad when bad is not NULL). 0 or IFD_ENOMEM (p is then empty). */
int ifd_cli_prom_parse(ifd_cli_prom_t *p, const char *text, size_t len, size_t *bad);
void ifd_cli_prom_free(ifd_cli_prom_t *p);

/* The value of label `key` of a sample, or NULL. */
const char *ifd_cli_prom_label(const ifd_cli_prom_sample_t *s, const char *key);

/*
 * The sum over the samples named `name` whose label `key` equals `value`
 * (key NULL: every sample of that name). *found says whether any matched
 * (found may be NULL); the sum is 0 then.
 */
double ifd_cli_prom_sum(const ifd_cli_prom_t *p, const char *name, const char *key,
                        const char *value, bool *found);

#endif
