/*
 * worker_cli.h — the inferd-worker command line, kept out of main.c so that
 * tests can drive it in-process.
 */
#ifndef IFD_WORKER_CLI_H
#define IFD_WORKER_CLI_H

/* Runs inferd-worker with argv; returns the process exit status
 * (0 ok, 1 runtime failure, 2 usage error). */
int ifd_worker_main(int argc, char **argv);

#endif
