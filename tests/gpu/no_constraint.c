/*
 * no_constraint.c — for tests/gpu/check.sh's standalone device build only:
 * the sampler (worker/sampler.c) applies grammar constraints through
 * ifd_constraint_mask (common/grammar/grammar_mask.c), which needs the tokenizer,
 * PCRE2 and xxhash that the device machine lacks. The GPU sampling test
 * never sets a constraint, so the sampler never calls this; if it ever did,
 * the call fails loudly (IFD_ENOTSUP and a log line) instead of masking.
 * The CMake build links the real grammar_mask.c.
 */
#include "grammar/grammar_mask.h"

#include "error.h"
#include "log.h"

int ifd_constraint_mask(ifd_constraint_t *c, const int32_t *generated, size_t n, uint32_t *bits)
{
    (void)c, (void)generated, (void)n, (void)bits;
    IFD_ERROR("check.sh build: grammar constraints are not linked in");
    return IFD_ENOTSUP;
}
