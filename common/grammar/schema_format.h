/*
 * schema_format.h — the JSON Schema `format`s inferd enforces, defined
 * once: the grammar rule that writes each one (grammar_conv.c BASE_RULES,
 * chosen by grammar_conv_schema.c) and the check that asserts it on a
 * finished output (schema_check.c). One table, so the converter and the
 * check can never disagree on which formats are enforced.
 *
 * The checks follow the standards (RFC 3339 date, time, date-time and its
 * Appendix A duration; RFC 5322's addr-spec for email: dot-atom or quoted
 * local part, a host name or an address literal as domain; RFC 3986 uri and
 * uri-reference; RFC 791 dotted-quad ipv4 without leading zeros; RFC 4291
 * ipv6 text forms without zone; RFC 1123 host names with RFC 5891's hyphen
 * rule, A-labels decoded as Punycode (RFC 3492); RFC 4122 uuid text, any
 * version; RFC 6531 idn-email: non-ASCII in the local part, an ASCII
 * domain; idn-hostname: the ASCII host names (LDH labels, A-labels), a
 * U-label failing, since IDNA2008's validity is Unicode's tables; RFC 6570
 * uri-template, level 4, with erratum 6937's apostrophe). Each grammar rule writes a subset of its check's strings (no
 * February 29th, no leap second, bounded label counts, …; tested by
 * test_grammar's format walk), so an output the grammar wrote always passes
 * and an output of a loose conversion that left the format out is judged
 * by the standard. Not checked: IDNA2008's per-code-point rules for
 * A-labels (Unicode's tables), which a grammar never writes (its labels
 * are ASCII and never start with "xn--").
 */
#ifndef IFD_SCHEMA_FORMAT_H
#define IFD_SCHEMA_FORMAT_H

#include <stdbool.h>
#include <stddef.h>

typedef struct {
    const char *name; /* the format's name in a schema ("date-time") */
    const char *rule; /* its grammar rule in BASE_RULES, quotes included ("jdatetime") */
    int lo, hi;       /* the rule's shortest and longest string in characters (hi -1: none) */
    /* whether s[0..n) (a decoded JSON string, may hold NULs) is of the format */
    bool (*check)(const char *s, size_t n);
} ifd_schema_format_t;

/* The enforced format named name, or NULL (an unknown format: an
 * annotation). name borrowed; the result is static. Reentrant. */
const ifd_schema_format_t *ifd_schema_format_find(const char *name);

#endif
