/*
 * schema_json.h — JSON text that may hold a JSON Schema, parsed with
 * integers beyond int64 kept.
 *
 * jansson refuses an integer literal beyond int64 ("too big integer"), and
 * its JSON_DECODE_INT_AS_REAL would turn every integer into a double. A
 * schema's 20-digit bounds (`"maximum": 18446744073709551615`, Snowplow's
 * `9223372036854776000`) are read here as doubles, and only those: what
 * the converter reads from such a number is exact all the same, since it
 * writes integers of at most 16 digits (a bound beyond 10^16 is no bound,
 * or one no written value reaches, either way from the double), and the
 * check at the end compares written values, which never come near it. The
 * one place a double would change the schema is a value the grammar writes
 * back whole: an integer inside `enum` or `const` (at any depth) that a
 * double does not hold exactly (its shortest round-trip digits differ from
 * the literal's: 18446744073709551615, not 9223372036854776000) is refused
 * with a message naming it, never rounded.
 *
 * Reentrant; no state. The returned value is the caller's (json_decref).
 */
#ifndef IFD_SCHEMA_JSON_H
#define IFD_SCHEMA_JSON_H

#include <jansson.h>
#include <stddef.h>

/*
 * json_loadb(text, len, flags, err), except that where jansson refuses an
 * integer beyond int64 the text is read again with each such integer as a
 * double (above). NULL with err filled as json_loadb fills it (err->text
 * names an enum/const integer a double cannot hold).
 */
json_t *ifd_schema_json_loadb(const char *text, size_t len, size_t flags, json_error_t *err);

#endif
