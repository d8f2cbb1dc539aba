/* main.c — inferd-worker's entry point; everything lives in worker_cli.c. */
#include "worker_cli.h"

int main(int argc, char **argv)
{
    return ifd_worker_main(argc, argv);
}
