/*
 * chat.h — `infer chat`: a conversation with the daemon's model in the
 * terminal. Each line is sent with the whole history and the answer
 * streams back; /reset, /system TEXT, /save FILE, /help and /quit are
 * commands; Ctrl-C stops the current answer (the connection is closed, so
 * the daemon cancels the request and frees its KV blocks) and Ctrl-D
 * quits. Lines are edited with libedit when infer was built with it and
 * stdin is a terminal; piped stdin is read line by line with no prompt.
 *
 * Takes argv as main() does and returns a process exit status (cli.h).
 * Installs a SIGINT handler for its duration. Main thread only.
 */
#ifndef IFD_CLIENT_CHAT_H
#define IFD_CLIENT_CHAT_H

int ifd_cli_chat_main(int argc, char **argv);

#endif
