/*
 * chat_template.h — turning a list of chat messages into a model prompt.
 *
 * inferd does not run Jinja. It recognises the template family from the
 * model's chat_template string (or, when the file has none, from its
 * vocabulary: <start_of_turn> → gemma, <|im_start|> → chatml, …) and renders
 * that family with built-in C code whose output is byte-identical to what
 * Hugging Face's apply_chat_template produces for the official template
 * (golden-string tests per family). Families: chatml (SmolLM2, Qwen; a
 * default system prompt found in the template is kept), llama3, gemma,
 * llama2, mistral, phi3. A name given by the user (--chat-template NAME)
 * overrides detection; an unknown name is an error that lists the known ones.
 *
 * The rendered prompt carries the byte ranges of every message content.
 * ifd_chat_tokenize tokenizes the prompt with special-token parsing on for
 * the template's own text and off inside those ranges, so a user message
 * containing "<|im_start|>" stays plain text. If the template already starts
 * with BOS, the tokenizer's own BOS is not added again (never a double BOS).
 *
 * Ownership: a template object is created from (and may keep pointers into)
 * a tokenizer that must outlive it; free it with ifd_chat_template_destroy.
 * Rendered prompts are owned by the caller (ifd_chat_prompt_free).
 * Threading: a template is immutable after creation; render/tokenize may run
 * concurrently from many threads.
 */
#ifndef IFD_CHAT_TEMPLATE_H
#define IFD_CHAT_TEMPLATE_H

#include <stdbool.h>
#include <stddef.h>

#include "tokenizer.h"

typedef enum {
    IFD_CHAT_CHATML = 0,
    IFD_CHAT_LLAMA3,
    IFD_CHAT_GEMMA,
    IFD_CHAT_LLAMA2,
    IFD_CHAT_MISTRAL,
    IFD_CHAT_PHI3,
    IFD_CHAT_FAMILY_COUNT
} ifd_chat_family_t;

/* Family name ("chatml", "llama3", "gemma", "llama2", "mistral", "phi3");
 * "?" when out of range. */
const char *ifd_chat_family_name(ifd_chat_family_t f);
/* By name (case-sensitive); IFD_ENOTFOUND when unknown. */
int ifd_chat_family_from_name(const char *name, ifd_chat_family_t *out);
/* "chatml, llama3, gemma, llama2, mistral, phi3" (static string). */
const char *ifd_chat_family_names(void);

/* Detects the family from a Jinja template string. 0 or IFD_ENOTFOUND. */
int ifd_chat_detect(const char *jinja, ifd_chat_family_t *out);

typedef struct {
    /* Family name overriding detection (--chat-template), or NULL. */
    const char *name;
    /* Jinja text to detect from instead of the tokenizer's (e.g. a template
     * file from the configuration), or NULL. */
    const char *jinja;
    /* llama3's "Today Date: …" line; NULL = "26 Jul 2024" (the template's
     * own fallback, deterministic). */
    const char *date;
} ifd_chat_params_t;

ifd_chat_params_t ifd_chat_default_params(void);

typedef struct ifd_chat_template ifd_chat_template_t;

/*
 * Creates the template for tokenizer `tok` (may be NULL: then BOS text and
 * stop ids come from the family's defaults / none). Detection order:
 * params->name; else params->jinja or the tokenizer's chat_template; else its
 * vocabulary.
 * Returns 0; IFD_ENOTFOUND for an unknown name or an unrecognised template
 * (errbuf lists the known names and suggests --chat-template); IFD_ENOMEM.
 */
int ifd_chat_template_create(ifd_chat_template_t **out, const ifd_tokenizer_t *tok,
                             const ifd_chat_params_t *params, char *errbuf, size_t errlen);
void ifd_chat_template_destroy(ifd_chat_template_t *tpl); /* NULL is a no-op */

ifd_chat_family_t ifd_chat_template_family(const ifd_chat_template_t *tpl);

/* Stop ids for generation: the family's end-of-turn tokens that exist in the
 * vocabulary plus the tokenizer's end-of-generation set, sorted, unique.
 * *ids lives as long as tpl. */
size_t ifd_chat_template_stop_ids(const ifd_chat_template_t *tpl, const ifd_token_t **ids);

/* One message. role: "system", "user", "assistant" (other roles render
 * verbatim where the family allows, else IFD_EINVAL). Both NUL-terminated;
 * content may be "" (never NULL). */
typedef struct {
    const char *role;
    const char *content;
} ifd_chat_msg_t;

/* A rendered prompt: text (malloc'ed, NUL-terminated) and the byte ranges of
 * message roles and contents in it (sorted, non-overlapping): the "plain"
 * spans where special tokens are never parsed. */
typedef struct {
    char *text;
    size_t len;
    ifd_span_t *content;
    size_t n_content;
} ifd_chat_prompt_t;

void ifd_chat_prompt_free(ifd_chat_prompt_t *p); /* frees the fields, zeroes p */

/*
 * Renders msgs[0..n) (n may be 0) and, with add_generation_prompt, the
 * header of the assistant's turn. Returns 0, IFD_EINVAL (a role the family
 * cannot express, named in the log), IFD_ENOMEM. On error *out is zeroed.
 */
int ifd_chat_render(const ifd_chat_template_t *tpl, const ifd_chat_msg_t *msgs, size_t n,
                    bool add_generation_prompt, ifd_chat_prompt_t *out);

/*
 * Tokenizes a rendered prompt with `tok` (the template's tokenizer): special
 * tokens parsed outside message contents only; BOS prepended when the
 * tokenizer adds one and the prompt does not already start with it.
 * APPENDS to *ids. Returns 0 or an ifd_tokenizer_encode error.
 */
int ifd_chat_tokenize(const ifd_chat_template_t *tpl, const ifd_tokenizer_t *tok,
                      const ifd_chat_prompt_t *p, ifd_tokens_t *ids);

#endif
