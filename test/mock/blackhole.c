/* blackhole.c - a local TCP port that never completes a connection.
 *
 * Tests need an upstream that behaves like a blackholed host (SYNs go
 * unanswered, so connect() runs into its timeout) without sending a packet
 * off the machine. A listening socket whose accept queue is full does that
 * on Linux: the kernel drops further SYNs. This program listens with a
 * backlog of 0 on 127.0.0.1, never calls accept(), fills the queue with its
 * own connections, prints "listening PORT" and waits for SIGTERM/SIGINT.
 *
 *   blackhole [--port-file F]
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define FILLERS 8

static volatile sig_atomic_t stop;
static void on_signal(int sig) {
  (void)sig;
  stop = 1;
}

int main(int argc, char **argv) {
  const char *port_file = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--port-file") == 0 && i + 1 < argc) {
      port_file = argv[++i];
    } else {
      fprintf(stderr, "usage: blackhole [--port-file F]\n");
      return 2;
    }
  }
  int ls = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t alen = sizeof a;
  if (ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof a) < 0 || listen(ls, 0) < 0 ||
      getsockname(ls, (struct sockaddr *)&a, &alen) < 0) {
    perror("blackhole: listen");
    return 1;
  }
  /* Fill the accept queue: the first connections complete and stay queued,
   * the others hang in SYN_SENT like every later client. */
  int fillers[FILLERS];
  for (int i = 0; i < FILLERS; i++) {
    fillers[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (fillers[i] < 0 || (connect(fillers[i], (struct sockaddr *)&a, sizeof a) < 0 &&
                           errno != EINPROGRESS)) {
      perror("blackhole: connect");
      return 1;
    }
  }
  usleep(100 * 1000); /* let the handshakes of the first ones complete */
  unsigned port = ntohs(a.sin_port);
  if (port_file != NULL) {
    FILE *f = fopen(port_file, "w");
    if (f == NULL) {
      perror("blackhole: port file");
      return 1;
    }
    fprintf(f, "%u\n", port);
    fclose(f);
  }
  printf("listening %u\n", port);
  fflush(stdout);
  signal(SIGTERM, on_signal);
  signal(SIGINT, on_signal);
  while (!stop) pause();
  for (int i = 0; i < FILLERS; i++) close(fillers[i]);
  close(ls);
  return 0;
}
