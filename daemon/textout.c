/*
 * textout.c — see textout.h. Stop strings are at most IFD_OAI_MAX_STOP (4)
 * and short, so each search is a memmem per stop string over the bytes not
 * yet searched, and each hold a comparison of the text's last bytes with
 * each stop's prefixes: both bounded by the stop strings' lengths, not by
 * the text's.
 */
#include "textout.h"

#include "error.h"
#include "proto/toolcall.h"

#include <stdlib.h>
#include <string.h>

static int ifd__cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

/* ---- rules -------------------------------------------------------------------------------- */

int ifd_textout_rules_init(ifd_textout_rules_t *r, const ifd_oai_request_t *rq, ifd_oai_kind_t kind,
                           const int32_t *eog, size_t n_eog)
{
    memset(r, 0, sizeof *r);
    r->rq = rq;
    /* completions echo with max_tokens 0: the prompt is the answer (vLLM's scoring form) */
    r->text = !(kind == IFD_OAI_COMPLETION && rq->max_tokens == 0);
    r->tools = kind == IFD_OAI_CHAT && rq->n_tools && rq->tool_choice != IFD_OAI_TOOL_CHOICE_NONE;
    for (size_t i = 0; i < rq->n_stop; i++) {
        size_t l = rq->stop_len[i];
        if (l > r->max_stop_len)
            r->max_stop_len = l;
    }
    if (rq->ignore_eos)
        n_eog = 0;
    size_t total = n_eog + rq->n_stop_token_ids;
    if (!total)
        return 0;
    r->stop_ids = malloc(total * sizeof *r->stop_ids);
    if (!r->stop_ids)
        return IFD_ENOMEM;
    for (size_t i = 0; i < n_eog; i++)
        r->stop_ids[i] = eog[i];
    for (size_t i = 0; i < rq->n_stop_token_ids; i++)
        r->stop_ids[n_eog + i] = rq->stop_token_ids[i];
    qsort(r->stop_ids, total, sizeof *r->stop_ids, ifd__cmp_i32);
    r->n_stop_ids = total;
    return 0;
}

void ifd_textout_rules_close(ifd_textout_rules_t *r)
{
    free(r->stop_ids);
    r->stop_ids = NULL;
    r->n_stop_ids = 0;
}

bool ifd_textout_is_stop_id(const ifd_textout_rules_t *r, int32_t id)
{
    return r->n_stop_ids &&
           bsearch(&id, r->stop_ids, r->n_stop_ids, sizeof id, ifd__cmp_i32) != NULL;
}

/* ---- the text ----------------------------------------------------------------------------- */

int ifd_textout_init(ifd_textout_t *t, const ifd_textout_rules_t *r, const ifd_tokenizer_t *tok)
{
    memset(t, 0, sizeof *t);
    t->rules = r;
    return ifd_detok_create(&t->detok, tok, 0);
}

void ifd_textout_close(ifd_textout_t *t)
{
    ifd_detok_destroy(t->detok);
    t->detok = NULL;
    ifd_buf_free(&t->text);
}

/* Earliest stop string in text[from..len): its offset (and *slen its
 * length), or -1. */
static long ifd__find_stop(const ifd_oai_request_t *rq, const char *t, size_t from, size_t len,
                           size_t *slen)
{
    long best = -1;
    for (size_t i = 0; i < rq->n_stop; i++) {
        const char *s = rq->stop[i];
        size_t sl = rq->stop_len[i]; /* a stop string may hold NULs */
        if (!sl || len - from < sl)
            continue;
        const char *p = memmem(t + from, len - from, s, sl);
        if (p && (best < 0 || p - t < best)) {
            best = p - t;
            *slen = sl;
        }
    }
    return best;
}

/* Longest suffix of text[from..len) that is a proper prefix of a stop string. */
static size_t ifd__hold(const ifd_oai_request_t *rq, const char *t, size_t from, size_t len)
{
    size_t hold = 0;
    for (size_t i = 0; i < rq->n_stop; i++) {
        const char *s = rq->stop[i];
        size_t sl = rq->stop_len[i]; /* a stop string may hold NULs */
        size_t k = sl ? sl - 1 : 0;
        if (k > len - from)
            k = len - from;
        for (; k > hold; k--)
            if (memcmp(t + len - k, s, k) == 0)
                break;
        if (k > hold)
            hold = k;
    }
    return hold;
}

/* Text was appended: search the stop strings from scan, cut at a match. */
static int ifd__search(ifd_textout_t *t)
{
    const ifd_textout_rules_t *r = t->rules;
    const ifd_oai_request_t *rq = r->rq;
    if (!rq->n_stop)
        return IFD_TEXTOUT_TEXT;
    /* vLLM's min_tokens: no stop string ends the text before it */
    if (t->n_tokens >= rq->min_tokens) {
        size_t slen = 0;
        long at = ifd__find_stop(rq, t->text.data ? t->text.data : "", t->scan, t->text.len, &slen);
        if (at >= 0) {
            if (rq->include_stop_str)
                at += (long)slen; /* vLLM's include_stop_str_in_output */
            t->text.len = (size_t)at;
            t->text.data[at] = '\0';
            return IFD_TEXTOUT_STOP;
        }
    }
    size_t keep = r->max_stop_len > 0 ? r->max_stop_len - 1 : 0;
    if (t->text.len > t->scan + keep)
        t->scan = t->text.len - keep;
    return IFD_TEXTOUT_TEXT;
}

int ifd_textout_push(ifd_textout_t *t, int32_t id)
{
    t->n_tokens++;
    if (!t->rules->text || ifd_textout_is_stop_id(t->rules, id))
        return IFD_TEXTOUT_NOTEXT;
    const char *s;
    size_t n;
    int rc = ifd_detok_push(t->detok, id, &s, &n);
    if (!rc && n)
        rc = ifd_buf_append(&t->text, s, n);
    return rc ? rc : ifd__search(t);
}

int ifd_textout_flush(ifd_textout_t *t)
{
    const char *s;
    size_t n;
    if (ifd_detok_flush(t->detok, &s, &n) == 0 && n)
        ifd_buf_append(&t->text, s, n); /* out of memory: the text ends a little short */
    return ifd__search(t);
}

/* Where streaming must stop for now so that a tool call is not sent as
 * content: forced calls hold everything, auto mode from a possible start. */
static size_t ifd__tool_hold_from(const ifd_textout_t *t)
{
    const ifd_textout_rules_t *r = t->rules;
    if (!r->tools)
        return t->text.len;
    if (r->rq->tool_choice != IFD_OAI_TOOL_CHOICE_AUTO)
        return 0;
    return ifd_toolcall_hold_from(t->text.data ? t->text.data : "", t->text.len);
}

bool ifd_textout_ready(const ifd_textout_t *t, size_t *upto)
{
    const ifd_oai_request_t *rq = t->rules->rq;
    size_t hold = rq->n_stop ? ifd__hold(rq, t->text.data, t->emitted, t->text.len) : 0;
    size_t u = t->text.len - hold;
    size_t tool = ifd__tool_hold_from(t);
    if (tool < u)
        u = tool;
    if (u < t->emitted)
        u = t->emitted;
    *upto = u;
    return !(u == t->emitted && tool < t->text.len);
}

const char *ifd_textout_take(ifd_textout_t *t, size_t upto, size_t *len)
{
    IFD_ASSERT(upto <= t->text.len || upto <= t->emitted);
    const char *p = t->text.data ? t->text.data + t->emitted : NULL;
    /* A stop string can match in text already streamed only when min_tokens
     * let it through earlier and scan still trails it: nothing is taken back. */
    *len = upto > t->emitted ? upto - t->emitted : 0;
    if (upto > t->emitted)
        t->emitted = upto;
    return p;
}

/* ---- the end: tool calls and the finish reason ------------------------------------------- */

/*
 * tool_choice "required" cut by max_tokens: the grammar's array
 * [{…},{…},{… was still growing (a small model may repeat calls until the
 * limit). The calls that are whole are kept: the text up to the last "}"
 * that closes a parsable prefix, with "]" added. false: none is whole.
 */
static bool ifd__salvage_calls(const ifd_textout_t *t, ifd_arena_t *a, ifd_toolcall_result_t *r)
{
    const ifd_oai_request_t *rq = t->rules->rq;
    const char *s0 = t->text.data;
    if (!s0 || rq->tool_choice != IFD_OAI_TOOL_CHOICE_REQUIRED)
        return false;
    int tries = 0;
    for (size_t end = t->text.len; end > 0 && tries < 64; end--) {
        if (s0[end - 1] != '}')
            continue;
        tries++;
        char *s = ifd_arena_alloc(a, end + 2);
        if (!s)
            return false;
        memcpy(s, s0, end);
        memcpy(s + end, "]", 2);
        if (!ifd_toolcall_parse(a, s, end + 1, rq, r) && r->n_calls) {
            r->content_len = 0;
            return true;
        }
    }
    return false;
}

/* Parses the final text for tool calls (ids drawn here); with `cut`
 * (finish "length") only the whole calls of a forced array. */
static void ifd__parse_calls(ifd_textout_t *t, bool cut, ifd_arena_t *a)
{
    const ifd_textout_rules_t *rules = t->rules;
    ifd_toolcall_result_t r;
    if (!rules->tools)
        return;
    if (cut ? !ifd__salvage_calls(t, a, &r)
            : ifd_toolcall_parse(a, t->text.data ? t->text.data : "", t->text.len, rules->rq, &r) ||
                  !r.n_calls)
        return;
    ifd_oai_tool_call_t *tc = ifd_arena_calloc(a, r.n_calls, sizeof *tc);
    if (!tc)
        return;
    IFD_ASSERT(rules->call_id);
    for (size_t i = 0; i < r.n_calls; i++) {
        tc[i].id = rules->call_id(rules->call_id_ud, a);
        tc[i].name = r.calls[i].name;
        tc[i].arguments = r.calls[i].arguments;
        if (!tc[i].id)
            return;
    }
    t->calls = tc;
    t->n_calls = r.n_calls;
    t->content_len = r.content_len;
}

const char *ifd_textout_end(ifd_textout_t *t, bool length, ifd_arena_t *a)
{
    ifd__parse_calls(t, length, a);
    if (t->n_calls && !length)
        return "tool_calls"; /* a cut forced array keeps "length" */
    return length ? "length" : "stop";
}
