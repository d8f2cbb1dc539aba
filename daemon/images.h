/*
 * images.h — the router's half of the image path (issue 28, docs/vision.md):
 * a chat request's image parts (proto/openai.h, ifd_oai_image_t) checked on
 * the loop, then decoded into the pictures a worker's ADD carries
 * (proto/wire.h, ifd_wire_image_t) on the thread pool:
 *
 *   ifd_images_setup  the model's vision (READY.vision) and the config's
 *                     limits → what a request is held to (on the loop);
 *   ifd_images_check  on the loop, cheap: the model takes images, their
 *                     count, data: URLs, or http(s) URLs of the hosts
 *                     allow_image_urls lists (imgurl.h; none by default);
 *   ifd_images_decode on the thread pool: each data URL →
 *                     ifd_image_data_url (max_image_bytes), each http(s)
 *                     URL → ifd_imgurl_fetch (max_image_bytes,
 *                     image_url_timeout, the SSRF guard) → ifd_image_decode
 *                     (max_image_pixels) → ifd_image_prep_resize (the whole
 *                     image, then its pan-and-scan crops) → a 128-bit hash
 *                     of each picture's pixels;
 *   ifd_images_place  after the prompt's expansion (common/chat/
 *                     image_prompt.h): each picture's tokens.
 *
 * Every refusal is a 400 naming the part ("messages[i].content[k]", or
 * Responses' "input[i].content[k]") and the reason; a failure leaves
 * nothing allocated in the set.
 *
 * Ownership: an ifd_images_t owns its pictures' pixels until
 * ifd_images_free; the gen request keeps it until it is freed, so a
 * sequence re-dispatched after a worker crash re-sends the same pictures
 * (the router borrows them: router.h). Threading: setup and check on the
 * loop, decode on one thread-pool thread at a time per set; the rest is
 * pure.
 */
#ifndef IFD_DAEMON_IMAGES_H
#define IFD_DAEMON_IMAGES_H

#include "chat/image_prompt.h"
#include "config.h"
#include "image/preprocess.h"
#include "proto/openai.h"
#include "proto/wire.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* What a request's images are held to, from the model and the config. */
typedef struct {
    uint32_t tokens_per_image; /* 0: the model takes no images */
    ifd_image_prep_t prep;     /* the processor's first half (READY.vision) */
    ifd_image_prompt_t ip;     /* the placeholder's expansion (image_prompt.h) */
    uint64_t max_bytes;        /* max_image_bytes */
    uint64_t max_pixels;       /* max_image_pixels */
    const char *allow_urls;    /* allow_image_urls: borrowed from the config, which never
                                * changes it (not reloadable); "" or NULL: none */
    double url_timeout;        /* image_url_timeout (s) */
    uint32_t max_images;       /* limit_images_per_prompt, at most what one frame holds */
    uint32_t max_pictures;     /* pictures (crops included) one ADD frame holds */
    uint32_t max_redirects;    /* image_url_max_redirects */
} ifd_images_setup_t;

/* Fills *s from a worker's READY.vision and the config. Pure. */
void ifd_images_setup(ifd_images_setup_t *s, const ifd_wire_vision_t *v, const ifd_config_t *cfg);

/* Pictures of height × width one ADD frame holds beside a prompt of up to
 * 4 MiB of tokens: (IFD_WIRE_MAX_BODY - 4 MiB) / (h × w × 3), at most
 * IFD_WIRE_MAX_IMAGES; 0 for a zero size. Pure. */
uint32_t ifd_images_frame_fit(uint32_t height, uint32_t width);

/*
 * On the loop: the request's images against s — 0 (none, or all may be
 * decoded); IFD_EINVAL with *e a 400: the model takes no images (the part's
 * type named), prompt_logprobs (the engine refuses it with images), more
 * than s->max_images, a URL that is not a data: URL (http(s) URLs: unless
 * s->allow_urls is set), an http(s) URL that ifd_imgurl_parse refuses or
 * whose host s->allow_urls does not list.
 */
int ifd_images_check(const ifd_images_setup_t *s, const ifd_oai_request_t *rq, ifd_oai_error_t *e);

/* A request's pictures, in prompt order (each image's whole picture, then
 * its pan-and-scan crops). pics[k].pos is set by ifd_images_place. */
typedef struct {
    ifd_wire_image_t *pics;
    uint32_t n_pics;
    uint32_t *n_crops; /* per image part: its pan-and-scan crops (0: one picture) */
    uint32_t n_images;
} ifd_images_t;

/*
 * On the thread pool: decodes every image of rq into *out (zeroed first),
 * pan-and-scan as the request's mm_processor_kwargs.do_pan_and_scan says,
 * else as the model's preprocessor. Stops between images once *cancel
 * (may be NULL) is set, and aborts a fetch when it is: IFD_ECANCELED.
 * Returns 0; IFD_EINVAL with *e a 400 naming the part (not a base64 data
 * URL, an http(s) URL's fetch failed or timed out, over max_image_bytes, not an
 * image, over max_image_pixels or a side of 16384, truncated, corrupt, the
 * pictures over one frame); IFD_ENOTSUP (the model's preprocessing cannot
 * be run: *e a 500); IFD_ENOMEM. On failure *out holds nothing.
 */
int ifd_images_decode(ifd_images_t *out, const ifd_images_setup_t *s, const ifd_oai_request_t *rq,
                      const atomic_int *cancel, ifd_oai_error_t *e);

/*
 * Gives each picture its soft tokens: spans[k] (ifd_image_prompt_encode's,
 * one per placeholder, in order) for picture k. 0, or IFD_EINVAL when the
 * counts differ (the chat template did not render one placeholder per
 * picture) or a span is not s->tokens_per_image long.
 */
int ifd_images_place(ifd_images_t *im, const ifd_images_setup_t *s, const ifd_image_pos_t *spans,
                     size_t n_spans);

/* Frees the pixels and arrays; zeroes *im. NULL or empty: a no-op. */
void ifd_images_free(ifd_images_t *im);

#endif
