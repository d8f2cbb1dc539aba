/*
 * textout.h — the text of one generated choice: from the token ids a worker
 * sends to the bytes that may be streamed now, and how the choice ends.
 *
 *   ids → text    incremental detokenization (tokenizer.h's ifd_detok_t):
 *                 only whole UTF-8 characters reach the text, so a
 *                 character split across tokens is never cut. Ids that end
 *                 a sequence (EOS, end-of-turn, stop_token_ids) are counted
 *                 but never detokenized: their text is not part of the
 *                 answer.
 *   stop strings  searched in the text as it grows, so one that straddles
 *                 tokens is found; the text is cut where the earliest one
 *                 starts (after it with include_stop_str_in_output) and the
 *                 choice ends. vLLM's min_tokens: none matches before that
 *                 many tokens.
 *   streaming     text that could still grow into a stop string (the
 *                 longest suffix that is a proper prefix of one) is held
 *                 back until it cannot; chat with tools also holds the text
 *                 from where a tool call may start (all of it when a call is
 *                 forced), so a call never goes out as content.
 *   the end       tool calls parsed from the final text (a forced array cut
 *                 by max_tokens keeps its whole calls) and the finish reason.
 *
 * Two offsets into the text:
 *   scan     stop strings have been searched in text[0 .. scan) and none
 *            starts before it (a stop may still begin in the last
 *            max_stop_len - 1 bytes, so scan trails the end by that much);
 *   emitted  bytes handed out to be streamed (ifd_textout_take) — never
 *            past the held-back suffix, so no stop text ever leaves. A stop
 *            string's first byte is a UTF-8 lead byte, so holding back from
 *            there never splits a character.
 *
 * Pure: no I/O, no event loop (tests/unit/test_textout.c drives it with
 * token ids). Ownership: rules borrow the parsed request, which must outlive
 * them, and own their stop-id set (ifd_textout_rules_close); a textout
 * borrows its rules and the tokenizer and owns its detokenizer and text
 * (ifd_textout_close); tool calls come from the arena given to
 * ifd_textout_end. Threading: one thread per textout (the daemon's loop);
 * rules are read-only once made.
 */
#ifndef IFD_DAEMON_TEXTOUT_H
#define IFD_DAEMON_TEXTOUT_H

#include "arena.h"
#include "proto/openai.h"
#include "tokenizer/tokenizer.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Makes a tool call's id in a (NULL: out of memory). */
typedef char *(*ifd_textout_call_id_fn)(void *ud, ifd_arena_t *a);

/* What the text of every choice of one request obeys. Plain data, filled by
 * ifd_textout_rules_init; call_id is the caller's to set. */
typedef struct {
    const ifd_oai_request_t *rq; /* stop, include_stop_str, min_tokens, tools, tool_choice */
    bool text;                   /* false: no token has text (completions echo, max_tokens 0) */
    bool tools;                  /* chat with tools, tool_choice not "none": calls may appear */
    size_t max_stop_len;         /* the longest stop string */
    int32_t *stop_ids;           /* sorted; counted, never detokenized (owned) */
    size_t n_stop_ids;
    ifd_textout_call_id_fn call_id; /* required with tools */
    void *call_id_ud;
} ifd_textout_rules_t;

/* The rules of request rq, served as kind (IFD_OAI_CHAT for /v1/responses
 * too). eog: the ids that end a turn (the chat template's stop ids for
 * chat, the tokenizer's end-of-generation ids otherwise), left out with
 * ignore_eos; rq's stop_token_ids join them. 0 or IFD_ENOMEM. */
int ifd_textout_rules_init(ifd_textout_rules_t *r, const ifd_oai_request_t *rq, ifd_oai_kind_t kind,
                           const int32_t *eog, size_t n_eog);
/* Frees the stop-id set; a zeroed or closed r is fine. */
void ifd_textout_rules_close(ifd_textout_rules_t *r);

/* Whether id ends a sequence without text (a stop id). */
bool ifd_textout_is_stop_id(const ifd_textout_rules_t *r, int32_t id);

/* One choice's text. Embedded by the caller; the fields are read-only. */
typedef struct {
    const ifd_textout_rules_t *rules;
    ifd_detok_t *detok;
    ifd_buf_t text;    /* the answer so far, NUL-terminated once non-empty */
    size_t scan;       /* see the top of this file */
    size_t emitted;    /* see the top of this file */
    uint32_t n_tokens; /* tokens pushed, with text or not */
    /* set by ifd_textout_end: the tool calls found in the final text */
    ifd_oai_tool_call_t *calls;
    size_t n_calls;
    size_t content_len; /* with calls: the text before them */
} ifd_textout_t;

/* An empty text under rules r, detokenizing with tok (both must outlive
 * it). 0 or IFD_ENOMEM; a zeroed ifd_textout_t may be closed either way. */
int ifd_textout_init(ifd_textout_t *t, const ifd_textout_rules_t *r, const ifd_tokenizer_t *tok);
void ifd_textout_close(ifd_textout_t *t);

/* What a token, or the end of the sequence, did to the text. */
typedef enum {
    IFD_TEXTOUT_NOTEXT = 0, /* nothing: a stop id, or rules without text */
    IFD_TEXTOUT_TEXT,       /* text may have grown: stream what ifd_textout_ready allows */
    IFD_TEXTOUT_STOP,       /* a stop string matched: the text is cut there and final */
} ifd_textout_event_t;

/* One generated token: counted, detokenized, its text searched for stop
 * strings. Returns an ifd_textout_event_t, or IFD_ENOMEM / IFD_ERANGE (the
 * token's text is lost). After IFD_TEXTOUT_STOP push nothing more. */
int ifd_textout_push(ifd_textout_t *t, int32_t id);

/* The sequence ended: the bytes the detokenizer held back (an unfinished
 * character as U+FFFD) join the text, which is searched once more.
 * IFD_TEXTOUT_TEXT or IFD_TEXTOUT_STOP. */
int ifd_textout_flush(ifd_textout_t *t);

/* Streaming: how far the text may go out now, in *upto (>= emitted).
 * false: nothing may go out — not even logprobs — while the text after
 * emitted may be a tool call. */
bool ifd_textout_ready(const ifd_textout_t *t, size_t *upto);

/* Hands out text[emitted .. upto) (*len bytes; NULL while the text is
 * empty) and moves emitted there. An upto below emitted hands out nothing
 * (a stop string matched in text already streamed: see test_textout.c). */
const char *ifd_textout_take(ifd_textout_t *t, size_t upto, size_t *len);

/* The text is final: with tools, parses its tool calls (calls, n_calls,
 * content_len; their ids from rules->call_id). length: the sequence ended
 * at max_tokens (then only the whole calls of a forced array are kept).
 * Returns the finish reason: "tool_calls" (calls found, not length),
 * "length" or "stop" (static strings). Out of memory: no calls. */
const char *ifd_textout_end(ifd_textout_t *t, bool length, ifd_arena_t *a);

#endif
