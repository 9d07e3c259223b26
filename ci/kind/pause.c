/* The pause image's process (the pod sandbox of every pod): waits for signals, reaps the
 * pod's orphans when it is the pid namespace's init, exits on SIGINT or SIGTERM. Built
 * static by ci/kind/build.sh. */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) { (void)sig; _exit(0); }

static void reap(int sig) {
  (void)sig;
  while (waitpid(-1, 0, WNOHANG) > 0) {
  }
}

int main(void) {
  struct sigaction action = {0};
  action.sa_handler = stop;
  sigaction(SIGINT, &action, 0);
  sigaction(SIGTERM, &action, 0);
  action.sa_handler = reap;
  action.sa_flags = SA_NOCLDSTOP;
  sigaction(SIGCHLD, &action, 0);
  for (;;) pause();
}
