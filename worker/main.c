/* main.c — inferd-worker's entry point; everything lives in worker_cli.c.
 *
 * One process-wide allocator setting is made here, before anything
 * allocates: a fixed mmap threshold. glibc's default threshold is dynamic:
 * each time a large mmap'd block is freed it rises to that block's size (up
 * to 32 MiB), after which the per-request buffers a serving worker makes
 * and drops (token lists, frames, grammar state for hundreds of concurrent
 * streams) come from the heap arenas of two threads and fragment them; the
 * worker's private memory then creeps up for minutes under 256 streams
 * (docs/reliability.md, the soak). A fixed 64 KiB threshold keeps every
 * large buffer mmap'd and returned to the system when freed.
 */
#include "worker_cli.h"

#include <malloc.h>

int main(int argc, char **argv)
{
    mallopt(M_MMAP_THRESHOLD, 64 * 1024);
    return ifd_worker_main(argc, argv);
}
