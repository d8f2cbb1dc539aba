/*
 * fuzz.h — what every fuzz target in tests/fuzz/ defines, and the checks
 * they share.
 *
 * A target is one file with LLVMFuzzerTestOneInput (and optionally
 * LLVMFuzzerInitialize). Built with clang's -fsanitize=fuzzer it is a
 * libFuzzer binary (tests/fuzz/run.sh runs each for a while in CI, label
 * slow); built with any compiler and driver.c it is a plain program that
 * runs every file of its committed corpus (tests/fuzz/corpus/<target>/) and
 * a fixed set of mutations of each, as a regression test (label unit, and
 * in test.sh's ASan+UBSan build). A target never writes outside memory it
 * owns and reports a broken property with IFD_FUZZ_CHECK, which aborts so
 * both libFuzzer and the sanitizers see it.
 *
 * Threading: single-threaded; a target may keep state built once in
 * LLVMFuzzerInitialize (a tokenizer) but none that one input leaves for the
 * next.
 */
#ifndef IFD_TESTS_FUZZ_H
#define IFD_TESTS_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#define IFD_FUZZ_CHECK(cond)                                                                       \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz check failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__);         \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

#endif
