/*
 * router.h — sequences, the router's queue and dispatch to workers.
 *
 * A sequence (ifd_rseq_t) is one generation: one choice of one prompt of
 * an API request. The router gives it a unique id, queues it, sends it to a
 * worker as an ADD frame when one has room (a READY worker running fewer
 * than its max_seqs sequences), and hands the worker's TOKENS / ERROR /
 * FINISHED events for it to its owner through ifd_rseq_ops_t.
 *
 * Routing: the prompt is probed in the KV pool's prefix index
 * (ifd_kvpool_probe, no references taken); among the workers with room,
 * the one whose device holds the longest cached prefix wins unless it runs
 * more than route_slack sequences beyond the least-loaded one, which then
 * wins instead (ties: the lowest load, then round robin). With a local
 * layers' pool (several devices of it: GPU workers) a device scores the run
 * its engine could use: the leading run on that device, cut to where the
 * local pool holds the first recomputed token's window there, exactly as
 * the engine's admission cuts it (ifd_kvpool_window_run). A prompt with
 * images is probed as the engine publishes it: each image's tokens replaced
 * by their keys (kvpool/kvkey.h: token, the picture's hash, index), so two
 * prompts that differ only by their picture do not score as one prefix.
 *
 * Fairness: each sequence belongs to a client (the ADD's client, a number
 * gen.c derives from who sent the request). Queued sequences wait in their
 * client's FIFO; when a worker has room, the next to go is the first of the
 * client with the fewest sequences dispatched (ties: the one that came
 * first), after the resumed ones, which go first as they always did. A
 * worker with no room left below its max_seqs still takes a sequence of a
 * client that has fewer there than its share — max_seqs over the clients
 * with sequences on it, that one counted — up to twice max_seqs in all:
 * its engine makes room by preempting the client running the most
 * (worker/engine.h, "Fairness"), so one client's n: 128, or its hundreds of
 * streams it never reads, cannot keep another client's request waiting for
 * whole generations. With one client, every rule here is the one above.
 *
 * Resumption: the router keeps every token streamed for a sequence. When
 * its worker dies, the sequence goes back to the front of the queue and is
 * re-sent (to any worker) as an ADD of prompt + streamed tokens with
 * n_generated set, so the owner sees the stream continue with no gap and no
 * duplicate (and, with the same seed, the same tokens). A sequence whose
 * last streamed token already ended it (max_tokens reached, a stop id) is
 * finished locally instead.
 *
 * Workers: the router reaches them only through ifd_router_transport_t
 * (below): the supervisor implements it in the daemon (ifd_sup_transport),
 * a fake in tests/unit/test_router.c. What comes back from the workers is
 * handed in through ifd_router_on_ready / _on_message / _on_lost /
 * _on_failed. So the whole policy — prefix-aware choice, route_slack, load
 * ties, queueing, resumption after a worker's death — runs without a
 * process, a socket or a loop.
 *
 * Ownership: sequences belong to the router. The owner holds a pointer from
 * submit until on_finished returns or until it calls ifd_router_release
 * (after which no callback comes; a sequence still running in a worker is
 * cancelled there and freed when its FINISHED arrives). Callbacks may call
 * ifd_router_release on any sequence and ifd_router_submit; they must not
 * free the router. Threading: loop thread only.
 */
#ifndef IFD_DAEMON_ROUTER_H
#define IFD_DAEMON_ROUTER_H

#include "kvpool/kvpool.h"
#include "metrics.h"
#include "proto/wire.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct ifd_router ifd_router_t;
typedef struct ifd_rseq ifd_rseq_t;

typedef struct {
    /* one token of this sequence (already appended to its tokens) */
    void (*on_token)(void *owner, ifd_rseq_t *s, const ifd_wire_token_t *ev);
    /* the worker reported an error for it; on_finished follows */
    void (*on_error)(void *owner, ifd_rseq_t *s, int code, const char *message);
    /* the last callback; the sequence is freed when it returns */
    void (*on_finished)(void *owner, ifd_rseq_t *s, const ifd_wire_finished_t *f);
    /* sent to a worker (the first time) */
    void (*on_dispatched)(void *owner, ifd_rseq_t *s);
    /* prompt logprobs (req.prompt_logprobs; may be NULL): m holds only
     * positions not delivered before, in order from m->pos (every position
     * 1 .. n_prompt - 1 exactly once, also across a resumption), all
     * before the sequence's first on_token */
    void (*on_prompt_logprobs)(void *owner, ifd_rseq_t *s, const ifd_wire_prompt_logprobs_t *m);
} ifd_rseq_ops_t;

/* What the router needs to know of worker w at the moment it routes. */
typedef struct {
    bool ready;        /* serving (READY): may be sent new sequences */
    bool unresponsive; /* ready, but a ping has gone unanswered (supervisor.h): it gets new
                        * sequences only while no responsive worker has room */
    uint32_t max_seqs; /* sequences it runs at once: it has room below that */
    int kv_device;     /* its device in the KV pool: the one its prefix hits are scored on */
} ifd_router_worker_t;

/*
 * The router's way to the workers (libuv-style: callbacks + a context).
 * Every callback gets ctx; all are required. The router copies the struct
 * at create; ctx and whatever it points to must outlive the router.
 * Threading: the router calls them from the loop thread only, from inside
 * its own entry points (submit, release, the on_* hooks).
 *
 * Re-entrancy: send must not call back into the router. kill may, and in
 * the daemon does: the supervisor reports the loss at once, so kill calls
 * ifd_router_on_lost(w) before it returns (the router expects either).
 */
typedef struct ifd_router_transport {
    void *ctx;
    int n_workers; /* worker slots 0 .. n_workers - 1, fixed for the router's life */
    /* Fills *out with worker w's state now (0 <= w < n_workers). */
    void (*worker)(void *ctx, int w, ifd_router_worker_t *out);
    /* Sends one frame to worker w; m and what it points to are borrowed for
     * the call. 0; IFD_EINVAL: the frame cannot be encoded (the router
     * fails that sequence); any other code: the worker cannot take frames
     * (the router kills it and routes elsewhere). */
    int (*send)(void *ctx, int w, const ifd_wire_msg_t *m);
    /* Kills worker w now: its sequences are lost (on_lost follows, maybe
     * from inside this call) and it is not ready any more. why: a log line
     * (borrowed). */
    void (*kill)(void *ctx, int w, const char *why);
    /* True when no worker can serve any more, nor will without help (every
     * one FAILED or STOPPED): queued sequences then fail. */
    bool (*all_failed)(void *ctx);
} ifd_router_transport_t;

typedef struct {
    ifd_kvpool_t *pool;
    ifd_router_transport_t transport;
    ifd_metrics_t *metrics; /* may be NULL; borrowed: worker_redispatched is counted here */
    const int32_t *eog_ids; /* the model's end-of-generation ids (copied) */
    uint32_t n_eog_ids;
    int route_slack;
    /* The local (sliding-window) layers' pool and their window, or NULL / 0:
     * a device's prefix score is then the run its worker could use, cut to
     * the local twins of its window (ifd_kvpool_window_run). */
    ifd_kvpool_t *local_pool;
    int sliding_window;
} ifd_router_params_t;

/* The pool, the local pool and the metrics are borrowed for the router's
 * life; eog_ids and the transport are copied. 0, IFD_EINVAL (no pool, a
 * transport callback missing, n_workers < 1), IFD_ENOMEM. */
int ifd_router_create(ifd_router_t **out, const ifd_router_params_t *p);
/* Frees every sequence (no callbacks) and the router. */
void ifd_router_destroy(ifd_router_t *r);

void ifd_router_set_slack(ifd_router_t *r, int route_slack);

/* Queues a new sequence and dispatches what can be. req is the request in
 * the one form it keeps from the API to the worker, the wire's ADD: its
 * tokens are the prompt (n_tokens >= 1, n_generated 0, max_tokens >= 1),
 * its id is ignored (the router numbers sequences), its client names the
 * client it counts to ("Fairness" above) and everything it points
 * to is copied (prompt, stop ids, logit bias, grammar) but its images
 * (req->images and their pixels: megabytes), which are borrowed until
 * ifd_router_release — a sequence re-sent after a worker's crash sends
 * them again (the owner keeps them: gen.c). 0 with *out set,
 * IFD_EINVAL (bad request), IFD_ENOMEM. */
int ifd_router_submit(ifd_router_t *r, const ifd_wire_add_t *req, const ifd_rseq_ops_t *ops,
                      void *owner, ifd_rseq_t **out);

/* The owner is done with s (see above). */
void ifd_router_release(ifd_router_t *r, ifd_rseq_t *s);

/* What the workers report, handed in by the supervisor's callbacks (main
 * wires them): w became READY; a TOKENS / PROMPT_LOGPROBS / ERROR /
 * FINISHED frame from w (borrowed for the call); w's sequences are gone
 * (it died or was killed: they are resumed elsewhere). */
void ifd_router_on_ready(ifd_router_t *r, int w);
void ifd_router_on_message(ifd_router_t *r, int w, const ifd_wire_msg_t *m);
void ifd_router_on_lost(ifd_router_t *r, int w);
/* A worker entered FAILED: when none can serve any more, queued sequences
 * fail (on_error + on_finished with reason error). */
void ifd_router_on_failed(ifd_router_t *r);

/* Shutting down: sequences of workers that die from now on are not resumed
 * but finished with an error. */
void ifd_router_stopping(ifd_router_t *r);

/* Sequences waiting in the queue / dispatched to a worker. */
int ifd_router_queued(const ifd_router_t *r);
int ifd_router_dispatched(const ifd_router_t *r);
/* Sequences dispatched to worker w. */
int ifd_router_worker_load(const ifd_router_t *r, int w);

#endif
