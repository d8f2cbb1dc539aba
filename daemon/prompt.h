/*
 * prompt.h — the prompt tokens of a chat request, built once for every
 * endpoint that needs them: POST /v1/chat/completions and /v1/responses
 * (gen.c) prefill them, POST /tokenize with "messages" (api.c) returns
 * them, so the two never differ.
 *
 * Rendering honours every chat input that shapes the prompt: the model's
 * template (or a built-in family), tools (rendered by a Jinja template that
 * mentions them, else a Hermes-style system text; none with tool_choice
 * "none"), assistant tool calls and role "tool" results, the "developer"
 * role (as "system"), chat_template_kwargs and documents (template
 * variables), add_generation_prompt, continue_final_message (the prompt is
 * cut after the last message's content), and truncate_prompt_tokens.
 *
 * Memory: strings made while rendering come from the caller's arena; the
 * token ids are appended to the caller's ifd_tokens_t. Threading: any
 * thread (the uv threadpool): the tokenizer and template are read-only,
 * and the arena must not be used by another thread meanwhile.
 */
#ifndef IFD_DAEMON_PROMPT_H
#define IFD_DAEMON_PROMPT_H

#include "api.h"
#include "chat/image_prompt.h"

/* A request's images in its prompt: ip (the model's ids, READY.vision)
 * and n_crops (per image part, its pan-and-scan crops; NULL: none) in; max
 * (the pictures: 1 + crops per image) and spans (room for max) get each
 * picture's soft tokens in the prompt's ids; n their count. */
typedef struct {
    const ifd_image_prompt_t *ip;
    const uint32_t *n_crops;
    ifd_image_pos_t *spans;
    size_t max, n;
} ifd_prompt_images_t;

/*
 * Renders and tokenizes the chat request rq (kind IFD_OAI_CHAT, parsed by
 * ifd_oai_parse_chat or ifd_responses_parse), appending its prompt ids to
 * *out, truncated as its truncate_prompt_tokens asks (ifd_prompt_truncate).
 * *echo (may be NULL) gets chat echo's text: the last message's content
 * (its length that message's content_len: it may hold NULs) when it is an
 * assistant message and rq->echo is set, else NULL (it borrows from rq).
 * The template renders within the server's budget (template_timeout) and
 * stops when *cancel (may be NULL) becomes nonzero: IFD_ECANCELED.
 * Returns 0; IFD_EINVAL or IFD_ETOOBIG with *err filled (a 400 naming
 * "messages" with the template's own words: it raised, a built-in family
 * lacks the role, continue_final_message cannot find the final message, a
 * budget: time, nesting, memory);
 * IFD_ENOMEM or a tokenizer error (*err untouched: a 500).
 * With images (rq->n_images, img not NULL): the template sees each image
 * part as {"type": "image"} (Gemma 3's renders <start_of_image>; a built-in
 * family only Gemma's), pan-and-scan crops get Gemma3Processor's wording,
 * each placeholder is expanded (common/chat/image_prompt.h) and img->spans
 * filled; a template that renders no placeholder per picture, or
 * truncate_prompt_tokens reaching the first image, is IFD_EINVAL (a 400).
 */
int ifd_prompt_chat(const ifd_api_t *api, ifd_arena_t *a, const ifd_oai_request_t *rq,
                    const atomic_int *cancel, ifd_tokens_t *out, const char **echo,
                    ifd_prompt_images_t *img, ifd_oai_error_t *err);

/* vLLM's truncate_prompt_tokens: keeps the last k ids of *t (k = the
 * request's value, the context length for -1, nothing done for 0). */
void ifd_prompt_truncate(const ifd_api_t *api, const ifd_oai_request_t *rq, ifd_tokens_t *t);

#endif
