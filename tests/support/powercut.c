/* A power cut for tests: an LD_PRELOAD shim that records what fsync made durable.

Loaded into a process (LD_PRELOAD), it watches the files under POWERCUT_ROOT.
Each successful fsync() or fdatasync() of a regular file there copies the
file's whole content, as it stands when the call returns, to
POWERCUT_SHADOW/<dev>-<ino> (written under a temporary name, then renamed:
a copy is whole or absent). A file created (open with O_CREAT of a name that did
not exist) starts with no copy, so a reused inode number never inherits an old
file's. tests/support/powercut.py then plays the cut: with the process killed,
every file under the root gets its last copy back, or is emptied if it was
never synced. That is what a power cut leaves when the page cache is lost and
nothing unsynced reached the disk, the strictest case (LazyFS's "clear cache"
fault); names (create, rename, unlink) count as durable at once, as on LazyFS.

Every call goes to the real one first; the bookkeeping never changes what the
caller sees (its own errors are ignored).
*/
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static const char *root, *shadow;
static size_t root_len;
static __thread int busy;  /* the shim's own opens and renames are not watched */

static int (*real_fsync)(int);
static int (*real_fdatasync)(int);
static int (*real_open)(const char *, int, ...);
static int (*real_open64)(const char *, int, ...);
static int (*real_openat)(int, const char *, int, ...);
static int (*real_openat64)(int, const char *, int, ...);

__attribute__((constructor)) static void init(void) {
    real_fsync = dlsym(RTLD_NEXT, "fsync");
    real_fdatasync = dlsym(RTLD_NEXT, "fdatasync");
    real_open = dlsym(RTLD_NEXT, "open");
    real_open64 = dlsym(RTLD_NEXT, "open64");
    real_openat = dlsym(RTLD_NEXT, "openat");
    real_openat64 = dlsym(RTLD_NEXT, "openat64");
    root = getenv("POWERCUT_ROOT");
    shadow = getenv("POWERCUT_SHADOW");
    if (!root || !shadow) root = shadow = NULL;
    else root_len = strlen(root);
}

/* Whether fd is a regular file under the root; its identity in *st. */
static int watched(int fd, struct stat *st) {
    char link[64], path[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    if (n <= 0) return 0;
    path[n] = 0;
    if ((size_t)n <= root_len || strncmp(path, root, root_len) || path[root_len] != '/')
        return 0;
    return fstat(fd, st) == 0 && S_ISREG(st->st_mode);
}

static void copy_name(char *out, size_t size, const struct stat *st) {
    snprintf(out, size, "%s/%lu-%lu", shadow, (unsigned long)st->st_dev,
             (unsigned long)st->st_ino);
}

/* The file's content as fsync left it becomes its durable copy. */
static void keep(int fd) {
    struct stat st;
    if (!root || busy || !watched(fd, &st)) return;
    busy = 1;
    char link[64], tmp[4200], dst[4200];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);  /* readable whatever fd's mode */
    copy_name(dst, sizeof dst, &st);
    snprintf(tmp, sizeof tmp, "%s/.tmp-%d-%ld", shadow, (int)getpid(), (long)syscall(SYS_gettid));
    int src = real_open(link, O_RDONLY | O_CLOEXEC);
    int out = src < 0 ? -1 : real_open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    int ok = out >= 0;
    char buf[1 << 16];
    ssize_t got;
    while (ok && (got = read(src, buf, sizeof buf)) > 0) {
        for (ssize_t done = 0; done < got;) {
            ssize_t w = write(out, buf + done, (size_t)(got - done));
            if (w <= 0) {
                ok = 0;
                break;
            }
            done += w;
        }
    }
    if (src >= 0) close(src);
    if (out >= 0) close(out);
    if (ok) rename(tmp, dst);
    else unlink(tmp);
    busy = 0;
}

/* A name just created: its inode starts with no durable copy. */
static void created(int fd) {
    struct stat st;
    if (!root || busy || fd < 0 || !watched(fd, &st)) return;
    char dst[4200];
    copy_name(dst, sizeof dst, &st);
    unlink(dst);
}

static int exists_at(int dirfd, const char *path) {
    struct stat st;
    return fstatat(dirfd, path, &st, 0) == 0;
}

int fsync(int fd) {
    int saved, rc = real_fsync(fd);
    saved = errno;
    if (rc == 0) keep(fd);
    errno = saved;
    return rc;
}

int fdatasync(int fd) {
    int saved, rc = real_fdatasync(fd);
    saved = errno;
    if (rc == 0) keep(fd);
    errno = saved;
    return rc;
}

#define OPEN_BODY(call, dirfd)                                  \
    mode_t mode = 0;                                            \
    if (flags & (O_CREAT | O_TMPFILE)) {                        \
        va_list ap;                                             \
        va_start(ap, flags);                                    \
        mode = va_arg(ap, mode_t);                              \
        va_end(ap);                                             \
    }                                                           \
    int fresh = (flags & O_CREAT) && !exists_at(dirfd, path);   \
    int fd = call;                                              \
    int saved = errno;                                          \
    if (fresh) created(fd);                                     \
    errno = saved;                                              \
    return fd;

int open(const char *path, int flags, ...) { OPEN_BODY(real_open(path, flags, mode), AT_FDCWD) }
int open64(const char *path, int flags, ...) { OPEN_BODY(real_open64(path, flags, mode), AT_FDCWD) }
int openat(int dirfd, const char *path, int flags, ...) {
    OPEN_BODY(real_openat(dirfd, path, flags, mode), dirfd)
}
int openat64(int dirfd, const char *path, int flags, ...) {
    OPEN_BODY(real_openat64(dirfd, path, flags, mode), dirfd)
}
