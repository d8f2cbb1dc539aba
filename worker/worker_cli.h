/*
 * worker_cli.h — the inferd-worker command line, kept out of main.c so that
 * tests can drive it in-process. It parses the options and hands each mode
 * to its module: --serve to serve.h, backends to backend_factory.h.
 *
 * Threading: the process's main thread (getopt's state is global).
 */
#ifndef IFD_WORKER_CLI_H
#define IFD_WORKER_CLI_H

/* Runs inferd-worker with argv; returns the process exit status
 * (0 ok, 1 runtime failure, 2 usage error). */
int ifd_worker_main(int argc, char **argv);

#endif
