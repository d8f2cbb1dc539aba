/*
 * worker_model.c — see worker_model.h.
 */
#include "worker_model.h"

#include "modelfile/model_source.h"
#include "modelfile/shape.h"

#include <stdio.h>

int ifd_worker_model_load(const ifd_worker_model_opts_t *o, ifd_backend_t *be,
                          ifd_model_t **model, ifd_tokenizer_t **tok, char *errbuf,
                          size_t errlen)
{
    int rc;
    *model = NULL;
    *tok = NULL;
    if (!o->shape || !o->shape[0]) {
        /* the tokenizer before the weights: ids past its size are masked in
         * the logits (ifd_model_load_source) */
        ifd_model_source_t *src = NULL;
        if ((rc = ifd_model_source_open(&src, o->model_path, errbuf, errlen)))
            return rc;
        if ((rc = ifd_tokenizer_create_source(tok, src, errbuf, errlen))) {
            ifd_model_source_close(src);
            return rc;
        }
        if ((rc = ifd_model_load_source(model, src, ifd_tokenizer_n_vocab(*tok), be, errbuf,
                                        errlen)))
            goto fail;
        return 0;
    }
    if ((rc = ifd_tokenizer_create_path(tok, o->model_path, errbuf, errlen)))
        return rc;
    ifd_model_config_t cfg;
    if ((rc = ifd_shape_load_vocab(&cfg, o->shape, (uint32_t)ifd_tokenizer_n_vocab(*tok), errbuf,
                                   errlen)) ||
        (rc = ifd_model_load_random(model, &cfg, o->weights_seed, be, errbuf, errlen)))
        goto fail;
    return 0;
fail:
    ifd_model_destroy(*model);
    ifd_tokenizer_destroy(*tok);
    *model = NULL;
    *tok = NULL;
    return rc;
}
