/* The KV pool's geometry for a model (kvparams.h). */
#include "kvparams.h"

ifd_kvpool_params_t ifd_kvpool_model_params(const ifd_model_config_t *cfg)
{
    ifd_kvpool_params_t kp = ifd_kvpool_default_params();
    kp.n_layers = (int)cfg->n_layer;
    kp.n_kv_heads = (int)cfg->n_head_kv;
    kp.head_dim = (int)cfg->head_dim;
    kp.dtype = IFD_KV_F32;
    return kp;
}

bool ifd_kvpool_model_params_split(const ifd_model_config_t *cfg, ifd_kvpool_params_t *global,
                                   ifd_kvpool_params_t *local)
{
    *global = *local = ifd_kvpool_model_params(cfg);
    const int n_local = ifd_model_n_local_layers(cfg);
    if (n_local == 0 || n_local == (int)cfg->n_layer)
        return false;
    global->n_layers = (int)cfg->n_layer - n_local;
    local->n_layers = n_local;
    return true;
}
