/*
 * jinja.h — a Jinja2-subset interpreter for model chat templates.
 *
 * A template is lexed and parsed once into an AST (ifd_jinja_parse) and
 * rendered any number of times against a context given as a jansson object
 * (ifd_jinja_render). The language and environment are those of Hugging
 * Face's apply_chat_template: jinja2's ImmutableSandboxedEnvironment with
 * trim_blocks=True, lstrip_blocks=True, the loopcontrols extension
 * (break/continue), the {% generation %} tag (renders its body), the globals
 * raise_exception(msg), strftime_now(fmt), namespace(...), range(...), and
 * transformers' tojson (json.dumps with ensure_ascii=False; indent,
 * separators, sort_keys, ensure_ascii accepted). Output is byte-identical to
 * Python's jinja2 3.1 for what is supported (docs/chat-templates.md lists it);
 * anything else is refused at parse time with an error naming the construct
 * and its line ("line 12: unsupported tag 'include'", "unknown filter 'x'").
 *
 * Values follow Python: str (indexed by code point), int (64-bit), float,
 * bool, None, list, dict (insertion-ordered), Jinja's Undefined (printing it
 * gives "", reading an attribute of it is an error, as in jinja2's default
 * Undefined).
 *
 * Limits: a rendering stops with IFD_ETOOBIG and a message when it exceeds
 * the output size, total loop iterations, call depth, memory or wall time
 * given in ifd_jinja_limits_t, or nests deeper than IFD_JINJA_MAX_NESTING
 * levels of evaluation (expressions, statements, macro calls and the
 * printing, comparing or serializing of nested values, all counted together;
 * a stack budget of IFD_JINJA_STACK_BUDGET bytes backs the count, whatever
 * the frames' sizes), and with IFD_ECANCELED when limits.cancel becomes
 * nonzero. Parsing refuses expressions and blocks nested deeper than 200 —
 * an expression's depth is its tree's height, so a chain of 20,000 filters
 * or operators is refused too. Hostile templates get an error, never a
 * crash or a hang; work that grows faster than the input (dict lookups,
 * `unique`, sorting keys) is hashed or n·log n.
 *
 * Ownership: ifd_jinja_parse copies what it needs from src; the template is
 * freed with ifd_jinja_destroy. ifd_jinja_render does not keep ctx; *out is
 * malloc'ed and owned by the caller.
 * Threading: a parsed template is immutable; any number of threads may render
 * it concurrently (each rendering has its own memory).
 */
#ifndef IFD_JINJA_H
#define IFD_JINJA_H

#include <jansson.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ifd_jinja ifd_jinja_t;

/*
 * Parses src[0..len). Returns 0; IFD_ENOTSUP (a construct outside the
 * subset: errbuf names it and its line); IFD_EFORMAT (a syntax error, with
 * line); IFD_ETOOBIG (nesting too deep); IFD_ENOMEM. errbuf may be NULL.
 */
int ifd_jinja_parse(ifd_jinja_t **out, const char *src, size_t len, char *errbuf, size_t errlen);
void ifd_jinja_destroy(ifd_jinja_t *t); /* NULL is a no-op */

/* Evaluation nesting of one rendering (see Limits above). */
#define IFD_JINJA_MAX_NESTING 1000
/* Bytes of the calling thread's stack a rendering may use. */
#define IFD_JINJA_STACK_BUDGET (1u << 20)

typedef struct {
    size_t max_output;  /* bytes of rendered text (default 16 MiB) */
    size_t max_memory;  /* bytes of values allocated while rendering (default 256 MiB) */
    uint64_t max_iters; /* loop iterations in all loops together (default 1,000,000) */
    unsigned max_depth; /* macro call / recursion depth (default 64) */
    int64_t now;        /* strftime_now's time (Unix seconds, local time); 0 = time(NULL) */
    /* Wall time of one rendering in milliseconds (default 10,000; 0 = none),
     * checked inside loops, filters and operators at least every few
     * thousand steps. */
    unsigned max_time_ms;
    /* When non-NULL and nonzero (set by another thread), the rendering stops
     * with IFD_ECANCELED at its next check. Must outlive the call. */
    const atomic_int *cancel;
} ifd_jinja_limits_t;

ifd_jinja_limits_t ifd_jinja_default_limits(void);

/*
 * Renders t with the variables of `ctx` (a JSON object: messages, tools,
 * add_generation_prompt, bos_token, …; NULL = none). lim NULL = defaults.
 * *out gets the text (malloc'ed, NUL-terminated, caller frees), *out_len its
 * length. Returns 0; IFD_EINVAL (a runtime error: raise_exception, a type
 * error, an undefined attribute — errbuf holds the message, and for
 * raise_exception exactly the template's message); IFD_ETOOBIG (a limit:
 * errbuf names it); IFD_ECANCELED (limits.cancel was set);
 * IFD_ENOTSUP (reached a construct outside the subset: an unknown filter or
 * test that jinja2 too only looks up when it runs, a str.format spec, an
 * integer beyond 64 bits); IFD_ENOMEM. On error *out is NULL.
 */
int ifd_jinja_render(const ifd_jinja_t *t, const json_t *ctx, const ifd_jinja_limits_t *lim,
                     char **out, size_t *out_len, char *errbuf, size_t errlen);

#endif
