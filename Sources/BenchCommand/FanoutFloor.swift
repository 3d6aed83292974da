/// The bare-FUSE floor of chat delivery, compiled and run by the benchmark next to the mount's
/// own figures (as `passthrough_ll` is for `cat`): what the kernel and libfuse alone cost to
/// wake N readers blocked in `read()` on this machine.
enum FanoutFloor {
  static let source = #"""
    // The bare-FUSE floor for chat delivery: a libfuse low-level file system with one stream
    // file whose reads at the end wait; a post appends a line and answers every waiting read at
    // once, in a tight loop, from the daemon itself (no network, no 9P). N readers in a child
    // process block in pread() as mount9bbs-bench's readers do. Prints "p50 P99" in ms.
    // Usage: fanout_floor MOUNTPOINT READERS POSTS
    #define _GNU_SOURCE
    #define FUSE_USE_VERSION 34
    #include <errno.h>
    #include <fcntl.h>
    #include <fuse_lowlevel.h>
    #include <pthread.h>
    #include <signal.h>
    #include <stdio.h>
    #include <stdlib.h>
    #include <string.h>
    #include <sys/stat.h>
    #include <sys/wait.h>
    #include <time.h>
    #include <unistd.h>

    #define MAX_WAITING 4096
    static char data[1 << 20];
    static size_t length;
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static fuse_req_t waiting[MAX_WAITING];
    static off_t waitingOffset[MAX_WAITING];
    static size_t waitingSize[MAX_WAITING];
    static int waitingCount;
    static struct fuse_session *session;

    static double now(void) {
      struct timespec t;
      clock_gettime(CLOCK_MONOTONIC, &t);
      return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
    }

    static void fs_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
      (void)fi;
      struct stat st = {0};
      st.st_ino = ino;
      st.st_mode = ino == 1 ? S_IFDIR | 0755 : S_IFREG | 0444;
      st.st_nlink = ino == 1 ? 2 : 1;
      fuse_reply_attr(req, &st, 0);
    }

    static void fs_lookup(fuse_req_t req, fuse_ino_t parent, const char *name) {
      (void)parent;
      if (strcmp(name, "room") != 0) {
        fuse_reply_err(req, ENOENT);
        return;
      }
      struct fuse_entry_param e = {0};
      e.ino = 2;
      e.attr.st_ino = 2;
      e.attr.st_mode = S_IFREG | 0444;
      e.attr.st_nlink = 1;
      fuse_reply_entry(req, &e);
    }

    static void fs_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
      (void)ino;
      fi->direct_io = 1;
      fuse_reply_open(req, fi);
    }

    static void fs_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                        struct fuse_file_info *fi) {
      (void)ino;
      (void)fi;
      pthread_mutex_lock(&lock);
      if ((size_t)off < length) {
        size_t n = length - off < size ? length - off : size;
        pthread_mutex_unlock(&lock);
        fuse_reply_buf(req, data + off, n);  // data only grows; [off, off+n) is stable
        return;
      }
      if (waitingCount == MAX_WAITING) {
        pthread_mutex_unlock(&lock);
        fuse_reply_err(req, EAGAIN);
        return;
      }
      waiting[waitingCount] = req;
      waitingOffset[waitingCount] = off;
      waitingSize[waitingCount] = size;
      waitingCount++;
      pthread_mutex_unlock(&lock);
    }

    static const struct fuse_lowlevel_ops operations = {
        .lookup = fs_lookup, .getattr = fs_getattr, .open = fs_open, .read = fs_read};

    static void publish(const char *line) {
      static fuse_req_t ready[MAX_WAITING];
      static off_t offsets[MAX_WAITING];
      static size_t sizes[MAX_WAITING];
      pthread_mutex_lock(&lock);
      memcpy(data + length, line, strlen(line));
      length += strlen(line);
      int count = waitingCount;
      memcpy(ready, waiting, count * sizeof *ready);
      memcpy(offsets, waitingOffset, count * sizeof *offsets);
      memcpy(sizes, waitingSize, count * sizeof *sizes);
      waitingCount = 0;
      size_t end = length;
      pthread_mutex_unlock(&lock);
      for (int k = 0; k < count; k++) {
        size_t n = end - offsets[k] < sizes[k] ? end - offsets[k] : sizes[k];
        fuse_reply_buf(ready[k], data + offsets[k], n);
      }
    }

    static void *serve(void *unused) {
      (void)unused;
      fuse_session_loop_mt(session, NULL);
      return NULL;
    }

    // Reader threads of the child: report "reader seq" for each line read, to the pipe.
    static const char *mountpoint;
    static int reportFD;
    static void *reader(void *argument) {
      long index = (long)argument;
      char path[4096];
      snprintf(path, sizeof path, "%s/room", mountpoint);
      int fd = open(path, O_RDONLY);
      if (fd < 0) return NULL;
      char record[64];
      int n = snprintf(record, sizeof record, "%ld open\n", index);
      write(reportFD, record, n);
      static __thread char buffer[65536];
      off_t offset = 0;
      for (;;) {
        ssize_t got = pread(fd, buffer, sizeof buffer, offset);
        if (got <= 0) break;
        double at = now();
        offset += got;
        int ended = 0;
        for (char *p = buffer; p < buffer + got && (p = memmem(p, buffer + got - p, "#b", 2)); p += 2) {
          if (strncmp(p + 2, "END#", 4) == 0) ended = 1;
          else {
            n = snprintf(record, sizeof record, "%ld %ld %.6f\n", index, strtol(p + 2, NULL, 10), at);
            write(reportFD, record, n);
          }
        }
        if (ended) break;
      }
      close(fd);
      return NULL;
    }

    static int compare(const void *a, const void *b) {
      double x = *(const double *)a, y = *(const double *)b;
      return x < y ? -1 : x > y;
    }

    int main(int argc, char **argv) {
      if (argc != 4) {
        fprintf(stderr, "usage: fanout_floor MOUNTPOINT READERS POSTS\n");
        return 2;
      }
      mountpoint = argv[1];
      int readers = atoi(argv[2]), posts = atoi(argv[3]);
      char *fuseArgv[] = {"fanout_floor", NULL};
      struct fuse_args args = FUSE_ARGS_INIT(1, fuseArgv);
      session = fuse_session_new(&args, &operations, sizeof operations, NULL);
      if (!session || fuse_session_mount(session, mountpoint) != 0) return 1;
      pthread_t server;
      pthread_create(&server, NULL, serve, NULL);

      int pipeFDs[2];
      if (pipe(pipeFDs) != 0) return 1;
      pid_t child = fork();
      if (child == 0) {
        close(pipeFDs[0]);
        reportFD = pipeFDs[1];
        pthread_t threads[1024];
        for (long i = 0; i < readers && i < 1024; i++) pthread_create(&threads[i], NULL, reader, (void *)i);
        for (long i = 0; i < readers && i < 1024; i++) pthread_join(threads[i], NULL);
        _exit(0);
      }
      close(pipeFDs[1]);
      FILE *reports = fdopen(pipeFDs[0], "r");
      char line[256];
      int opened = 0;
      while (opened < readers && fgets(line, sizeof line, reports))
        if (strstr(line, "open")) opened++;
      usleep(300000);  // every reader blocked at the end
      double *samples = calloc((size_t)readers * posts, sizeof *samples);
      int taken = 0;
      for (int post = 1; post <= posts; post++) {
        char text[128];
        snprintf(text, sizeof text, "[00:00:00] poster: lobby:bench #b%d#\n", post);
        double start = now();
        publish(text);
        int arrived = 0;
        while (arrived < readers && fgets(line, sizeof line, reports)) {
          long index, seq;
          double at;
          if (sscanf(line, "%ld %ld %lf", &index, &seq, &at) == 3 && seq == post) {
            samples[taken++] = at - start;
            arrived++;
          }
        }
        usleep(5000);
      }
      publish("[00:00:00] poster: lobby:bench #bEND#\n");
      int status;
      waitpid(child, &status, 0);
      qsort(samples, taken, sizeof *samples, compare);
      if (taken > 0) printf("%.4f %.4f\n", samples[taken / 2], samples[(taken * 99) / 100]);
      fflush(stdout);
      fuse_session_exit(session);
      fuse_session_unmount(session);
      _exit(taken == readers * posts ? 0 : 1);
    }
    """#
}
