"""The bubblewrap backend's file-operation helper: a static host binary that does every
transfer itself and executes nothing.

It is started on the host (from the root-only state folder), joins the sandbox's user and
mount namespaces by setns (outside its pid namespace, so no sandbox process can see, signal
or ptrace it), becomes the namespace's uid 0 and works with system calls only: no shell, no
`tar` or `cat` of the sandbox's, no dynamic loader, so nothing the agent could have written
ever runs outside the sandbox. Everything it touches is inside the sandbox's own mount view,
with the sandbox root's credentials.

argv: HELPER PID1 KEEP_CREDS OP ARGS... with OP one of
  write PATH MODE UID GID   stdin to PATH (parents made), then chown and chmod
  read PATH                 PATH to stdout (exit 3: missing; 4: a folder)
  chown UID GID PATH...     lchown
  pack DIR NAME...          the stream of each NAME (relative to DIR) and what is below it
  unpack DEST               the stream on stdin made under DEST (made first)
  restore ROOT...           empties each ROOT, then unpacks the stream at /
The stream (envs/sandbox/helper_ops.py): per entry a line `KIND MODE UID GID SEC NSEC SIZE
PATHLEN` (KIND d, f or l; MODE octal; SEC.NSEC its mtime), the path, then SIZE bytes (the
contents or the link target). Folders get their mtimes once everything in them is made.
"""

from __future__ import annotations

import functools

from envs.sandbox import seccomp

_HELPER_C = r"""
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>
static char buf[1 << 16];
static int fail(const char *what, const char *path) {
  fprintf(stderr, "%s %s: %s\n", what, path, strerror(errno));
  return 1;
}
static int put(int fd, const char *p, size_t n) {
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    p += w; n -= (size_t)w;
  }
  return 0;
}
static int copy_all(int in, int out) {
  for (;;) {
    ssize_t n = read(in, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return (int)n;
    if (put(out, buf, (size_t)n)) return -1;
  }
}
static int copy_n(FILE *in, int out, unsigned long long n) {  /* n bytes of the stream */
  while (n) {
    size_t k = fread(buf, 1, n < sizeof buf ? n : sizeof buf, in);
    if (!k) { errno = EPROTO; return -1; }
    if (out >= 0 && put(out, buf, k)) return -1;
    n -= k;
  }
  return 0;
}
static int mkdirs(char *path) {  /* mkdir -p */
  for (char *p = path + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    int r = mkdir(path, 0755);
    *p = '/';
    if (r && errno != EEXIST) return -1;
  }
  return mkdir(path, 0755) && errno != EEXIST ? -1 : 0;
}
static int enter(const char *pid, int keep) {
  char p[2][64];
  snprintf(p[0], 64, "/proc/%s/ns/user", pid);
  snprintf(p[1], 64, "/proc/%s/ns/mnt", pid);
  int u = open(p[0], O_RDONLY | O_CLOEXEC), m = open(p[1], O_RDONLY | O_CLOEXEC);
  if (u < 0 || m < 0) return fail("open", p[u < 0 ? 0 : 1]);
  if (setns(u, CLONE_NEWUSER)) return fail("setns", p[0]);
  if (setns(m, CLONE_NEWNS)) return fail("setns", p[1]);
  close(u); close(m);
  if (!keep && (setgroups(0, NULL) || setresgid(0, 0, 0) || setresuid(0, 0, 0)))
    return fail("setuid", "0");
  return chdir("/") ? fail("chdir", "/") : 0;
}
static int op_write(char *path, mode_t mode, uid_t uid, gid_t gid) {
  char *slash = strrchr(path, '/');
  if (slash && slash != path) {
    *slash = 0;
    int r = mkdirs(path);
    *slash = '/';
    if (r) return fail("mkdir", path);
  }
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return fail("open", path);
  if (copy_all(0, fd) || fchown(fd, uid, gid) || fchmod(fd, mode)) return fail("write", path);
  return close(fd) ? fail("close", path) : 0;
}
static int op_read(const char *path) {
  struct stat st;
  if (stat(path, &st)) return errno == ENOENT ? 3 : fail("stat", path);
  if (S_ISDIR(st.st_mode)) return 4;
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return fail("open", path);
  return copy_all(fd, 1) ? fail("read", path) : 0;
}
static int head(char kind, const struct stat *st, const char *path, unsigned long long size) {
  char h[160];
  int n = snprintf(h, sizeof h, "%c %o %u %u %lld %ld %llu %zu\n", kind, st->st_mode & 07777,
                   st->st_uid, st->st_gid, (long long)st->st_mtim.tv_sec, st->st_mtim.tv_nsec,
                   size, strlen(path));
  return put(1, h, (size_t)n) || put(1, path, strlen(path));
}
static int pack_one(const char *path, const struct stat *st, int flag, struct FTW *f) {
  (void)f;
  if (flag == FTW_D || flag == FTW_DNR) return head('d', st, path, 0) ? FTW_STOP : 0;
  if (flag == FTW_SL) {
    ssize_t n = readlink(path, buf, sizeof buf);
    if (n < 0) return 0;
    return head('l', st, path, (unsigned long long)n) || put(1, buf, (size_t)n) ? FTW_STOP : 0;
  }
  if (flag != FTW_F || !S_ISREG(st->st_mode)) return 0;  /* fifos, sockets, devices */
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  struct stat now;
  if (fd < 0 || fstat(fd, &now)) return fd >= 0 ? (close(fd), 0) : 0;  /* gone meanwhile */
  unsigned long long left = (unsigned long long)now.st_size;
  if (head('f', &now, path, left)) return FTW_STOP;
  while (left) {  /* exactly the size announced: zeros if the file shrank meanwhile */
    size_t want = left < sizeof buf ? left : sizeof buf;
    ssize_t k = read(fd, buf, want);
    if (k <= 0) { memset(buf, 0, want); k = (ssize_t)want; }
    if (put(1, buf, (size_t)k)) return FTW_STOP;
    left -= (unsigned long long)k;
  }
  close(fd);
  return 0;
}
static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *f) {
  (void)st;
  if (f->level == 0) return 0;
  return (flag == FTW_DP ? rmdir(path) : unlink(path)) ? (fail("remove", path), FTW_STOP) : 0;
}
static int bad_name(const char *p) {
  if (!*p || *p == '/') return 1;
  for (const char *s = p; (s = strstr(s, "..")); s += 2)
    if ((s == p || s[-1] == '/') && (s[2] == 0 || s[2] == '/')) return 1;
  return 0;
}
static struct dirtime { char *path; struct timespec t[2]; } *dirs;
static size_t ndirs;
static int make_entry(char kind, const char *path, mode_t mode, uid_t uid, gid_t gid,
                      struct timespec *t, unsigned long long size) {
  struct stat st;
  int have = !lstat(path, &st);
  int dir = have && S_ISDIR(st.st_mode);
  if (have && (kind != 'd' || !dir) && (dir ? rmdir(path) : unlink(path)))
    return fail("replace", path);
  if (kind == 'd') {
    if (mkdir(path, 0700) && errno != EEXIST) return fail("mkdir", path);
    if (lchown(path, uid, gid) || chmod(path, mode)) return fail("own", path);
    if (!(ndirs & (ndirs + 1)) && !(dirs = realloc(dirs, 2 * (ndirs + 1) * sizeof *dirs)))
      return fail("memory", path);
    dirs[ndirs].path = strdup(path);
    memcpy(dirs[ndirs++].t, t, 2 * sizeof *t);
    return 0;
  }
  if (kind == 'l') {
    if (size >= sizeof buf) { errno = ENAMETOOLONG; return fail("link", path); }
    if (fread(buf, 1, size, stdin) != size) { errno = EPROTO; return fail("link", path); }
    buf[size] = 0;
    if (symlink(buf, path) || lchown(path, uid, gid)) return fail("symlink", path);
    utimensat(AT_FDCWD, path, t, AT_SYMLINK_NOFOLLOW);
    return 0;
  }
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return fail("create", path);
  if (copy_n(stdin, fd, size) || fchown(fd, uid, gid) || fchmod(fd, mode) || futimens(fd, t))
    return fail("write", path);
  return close(fd) ? fail("close", path) : 0;
}
static int op_unpack(char *dest) {
  char line[160], path[4097];
  if (mkdirs(dest) || chdir(dest)) return fail("mkdir", dest);
  while (fgets(line, sizeof line, stdin)) {
    char kind;
    unsigned mode, uid, gid;
    long long sec;
    long nsec;
    unsigned long long size;
    size_t n;
    int got = sscanf(line, "%c %o %u %u %lld %ld %llu %zu", &kind, &mode, &uid, &gid, &sec,
                     &nsec, &size, &n);
    if (got != 8 || n >= sizeof path || fread(path, 1, n, stdin) != n || !strchr("dfl", kind)) {
      errno = EPROTO;
      return fail("stream", dest);
    }
    path[n] = 0;
    if (bad_name(path)) { errno = EINVAL; return fail("entry", path); }
    struct timespec t[2] = {{sec, nsec}, {sec, nsec}};
    if (make_entry(kind, path, mode, uid, gid, t, size)) return 1;
  }
  for (size_t i = ndirs; i-- > 0;)  /* after their contents: making an entry touches them */
    utimensat(AT_FDCWD, dirs[i].path, dirs[i].t, AT_SYMLINK_NOFOLLOW);
  return ferror(stdin) ? fail("stream", dest) : 0;
}
int main(int argc, char **argv) {
  if (argc < 4) return 2;
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (enter(argv[1], atoi(argv[2]))) return 1;
  const char *op = argv[3];
  if (!strcmp(op, "write") && argc == 8)
    return op_write(argv[4], (mode_t)strtoul(argv[5], NULL, 8), (uid_t)atol(argv[6]),
                    (gid_t)atol(argv[7]));
  if (!strcmp(op, "read") && argc == 5) return op_read(argv[4]);
  if (!strcmp(op, "chown") && argc >= 6) {
    for (int i = 6; i < argc; i++)
      if (lchown(argv[i], (uid_t)atol(argv[4]), (gid_t)atol(argv[5])))
        return fail("chown", argv[i]);
    return 0;
  }
  if (!strcmp(op, "pack") && argc >= 6) {
    if (chdir(argv[4])) return errno == ENOENT ? 3 : fail("chdir", argv[4]);
    for (int i = 5; i < argc; i++) {
      struct stat st;
      if (lstat(argv[i], &st)) return errno == ENOENT ? 3 : fail("stat", argv[i]);
      if (nftw(argv[i], pack_one, 32, FTW_PHYS)) return fail("pack", argv[i]);
    }
    return 0;
  }
  if (!strcmp(op, "unpack") && argc == 5) return op_unpack(argv[4]);
  if (!strcmp(op, "restore") && argc >= 5) {
    for (int i = 4; i < argc; i++)
      if (nftw(argv[i], rm_one, 32, FTW_DEPTH | FTW_PHYS)) return fail("empty", argv[i]);
    return op_unpack("/");
  }
  fprintf(stderr, "usage: helper PID1 KEEP_CREDS OP ARGS...\n");
  return 2;
}
"""


@functools.lru_cache(maxsize=1)
def helper_path() -> str:
  """The helper binary (built once with the C compiler, like the seccomp exec wrapper)."""
  return seccomp.build_static(_HELPER_C, "fileop-helper")
