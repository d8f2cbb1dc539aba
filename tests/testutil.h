/*
 * testutil.h — helpers shared by the Check tests: where the test data and
 * the default model are, loud skips, and running a suite.
 *
 * A skipped test prints "SKIPPED: <why>" to stderr and exits 77, which CTest
 * (SKIP_RETURN_CODE 77) reports as skipped, never as passed.
 */
#ifndef IFD_TESTUTIL_H
#define IFD_TESTUTIL_H

#include <check.h>
#include <stdbool.h>
#include <stddef.h>

#include "tokenizer/tokenizer.h"

/* $INFERD_TESTDATA_DIR when it exists as a directory, else NULL. */
const char *ifd_test_data_dir(void);

/* Path of a file under the test data dir in buf; NULL when the directory
 * or the file is missing. */
const char *ifd_test_data_file(const char *rel, char *buf, size_t len);

/* $INFERD_TEST_MODEL, else the fetch-model.sh location
 * (ifd_default_model_path in common/modelfile/model_config.h);
 * NULL when that file does not exist. */
const char *ifd_test_model_path(char *buf, size_t len);

/* ck_assert_msg for hot loops. Check's own assertion macros record the
 * passing line on every call (a message to the runner in fork mode: a write
 * and an allocation, ~10 us under ASan), which for millions of checks costs
 * more than the test; this one does nothing on success and fails the test
 * exactly as ck_abort_msg does. */
#define IFD_CHECK(expr, ...)                                                                       \
    do {                                                                                           \
        if (!(expr))                                                                               \
            ck_abort_msg(__VA_ARGS__);                                                             \
    } while (0)

/* ck_assert for hot loops, the same way. */
#define IFD_TASSERT(expr) IFD_CHECK(expr, "Assertion '%s' failed", #expr)

/* ck_assert_int_eq / _ge for hot loops: fails naming both values. */
#define IFD_TASSERT_CMP(a, op, b)                                                                  \
    do {                                                                                           \
        long long ifd__a = (long long)(a), ifd__b = (long long)(b);                                \
        if (!(ifd__a op ifd__b))                                                                   \
            ck_abort_msg("Assertion '%s' failed: %lld vs %lld", #a " " #op " " #b, ifd__a,         \
                         ifd__b);                                                                  \
    } while (0)

/* Whether $INFERD_TEST_SANITIZED is set (the ASan+UBSan build, which runs
 * several times slower): tests then run their reduced sets. */
int ifd_test_sanitized(void);

/* Prints "SKIPPED: …" and exits 77. */
void ifd_test_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* Runs the suite in fork mode; returns the process exit status. */
int ifd_test_run(Suite *s);

/* A NULL-terminated list of the tests START_TEST defines, for ifd_test_case. */
#define IFD_TESTS(...) ((const TTest *const[]){__VA_ARGS__, NULL})

/* Adds to s a case named `name` holding `tests` (IFD_TESTS(test_a, test_b)) in
 * that order, each with a timeout of timeout_s seconds (0: Check's default).
 * Returns the case, for the loop tests and fixtures a caller adds after. */
TCase *ifd_test_case(Suite *s, const char *name, int timeout_s, const TTest *const *tests);

/* Checks that s[0..n) comes back from encoding (BOS/EOS added) and
 * decoding, and that the streaming detokenizer fed the ids one at a time
 * (and flushed at the end, when flush) writes the same bytes. */
void ifd_test_roundtrip(const ifd_tokenizer_t *t, const char *s, size_t n, bool flush);

/* Reads a whole file into malloc'ed memory (*len set); NULL on error. */
void *ifd_test_read_file(const char *path, size_t *len);

#endif
