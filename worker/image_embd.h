/*
 * image_embd.h — inferd-worker's --image-embd POS:FILE.npy (offline
 * generation): an image given as its rows of input embeddings (float32
 * .npy [len, n_embd], C order: what the vision tower makes, or random rows
 * for the oracle test, tests/oracle/test_image_embd.py), placed at prompt
 * positions POS .. POS + len - 1 as one Gemma 3 image: those tokens take the
 * rows as their embeddings and attend to each other both ways
 * (ifd_generate_params_t.kv_last / .embd; docs/vision.md).
 *
 * Ownership: ifd_image_embd_t owns its arrays (ifd_image_embd_free).
 */
#ifndef IFD_IMAGE_EMBD_H
#define IFD_IMAGE_EMBD_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int32_t *kv_last;   /* [n_prompt] */
    const float **embd; /* [n_prompt] */
    float **rows;       /* one block per image */
    int n_images;
} ifd_image_embd_t;

/* Loads n specs "POS:FILE" for a prompt of n_prompt tokens and a model of
 * width n_embd. 0, or IFD_EINVAL (a bad spec or file, images overlapping or
 * past the prompt: message in err), IFD_ENOMEM; *ie is zeroed on error. */
int ifd_image_embd_load(ifd_image_embd_t *ie, const char *const *specs, int n, int n_prompt,
                        int n_embd, char *err, size_t errlen);
void ifd_image_embd_free(ifd_image_embd_t *ie);

#endif
