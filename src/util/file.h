/*
 * file.h -- opening the files sluice reads or shares (the config, an
 * overrides file, the admin token file, TLS files, the shared-memory
 * store), the one way: without blocking, regular files only, owned as
 * expected.
 *
 * Any of these may have been made, swapped or damaged by another local
 * user: a FIFO named as a file would stall a reload (and with it SIGTERM),
 * a symbolic link may point at /etc/shadow, a file another user owns is a
 * file that user can rewrite.  So every open goes through
 * sluice_file_open(), which opens with O_NONBLOCK (a FIFO or a device
 * never blocks the caller) and refuses, after fstat() on what it opened
 * (no race with a swap), anything that is not a regular file or is not
 * owned as expected.
 */
#ifndef SLUICE_UTIL_FILE_H
#define SLUICE_UTIL_FILE_H

#include <stddef.h>
#include <sys/stat.h>
#include <sys/types.h>

/* How sluice_file_open() opens and what it accepts. */
#define SLUICE_FILE_RDWR     0x1 /* read and write (else read only) */
#define SLUICE_FILE_NOFOLLOW 0x2 /* the name itself may not be a symlink */
#define SLUICE_FILE_OWNED    0x4 /* owned by this process's user or root */
#define SLUICE_FILE_CREATE   0x8 /* create it (0600) when missing */

typedef struct sluice_file_s {
	int fd;
	struct stat st;
	int created; /* SLUICE_FILE_CREATE made it */
	/* 1 when a message may quote its content: every user may read it
	 * anyway, or it is ours and was named directly (neither reached
	 * through a symbolic link nor one of several hard links, which may
	 * be someone's way to make us print a file they cannot read). */
	int quotable;
} sluice_file_t;

/*
 * Opens path (relative to dirfd when it is not AT_FDCWD) as `how` says,
 * with O_CLOEXEC and O_NONBLOCK, and checks what it opened: a regular
 * file; with SLUICE_FILE_OWNED owned by this process's effective user or
 * root (or, when group is not (gid_t)-1, carrying that group) and not
 * writable by every user.  Returns 0 with f filled (close f->fd), or -1
 * with why it was refused in why, without the path (the caller names it),
 * e.g. "is a FIFO, not a regular file" or "is owned by uid 65534
 * (nobody), not by uid 0 (root) who runs sluice, nor root".
 */
int sluice_file_open(sluice_file_t *f, int dirfd, const char *path,
		     unsigned how, gid_t group, char *why, size_t whylen);

/*
 * Owners trusted besides this process's user and root, for files that
 * someone else writes on purpose (a sidecar syncing a config directory
 * under its own uid): uids[0..nuids) and, when not (gid_t)-1, a group.
 */
typedef struct sluice_file_trust_s {
	const uid_t *uids;
	size_t nuids;
	gid_t group;
} sluice_file_trust_t;

/* sluice_file_open() trusting trust's owners as well (SLUICE_FILE_OWNED). */
int sluice_file_open_trusted(sluice_file_t *f, int dirfd, const char *path,
			     unsigned how, const sluice_file_trust_t *trust,
			     char *why, size_t whylen);

/*
 * Reads a whole regular file of at most max bytes, opened by
 * sluice_file_open(path, how), into *out (NUL terminated; free() it).
 * *quotable as sluice_file_t's.  Returns 0, or -1 with why as above
 * ("is larger than N bytes", "cannot be read: ...").
 */
int sluice_file_read(const char *path, size_t max, unsigned how, char **out,
		     size_t *len, int *quotable, char *why, size_t whylen);
/* sluice_file_read() trusting trust's owners as well. */
int sluice_file_read_trusted(const char *path, size_t max, unsigned how,
			     const sluice_file_trust_t *trust, char **out,
			     size_t *len, int *quotable, char *why,
			     size_t whylen);

/* "uid 65534 (nobody)" into buf, for messages. */
const char *sluice_file_user(uid_t uid, char *buf, size_t len);
/* "gid 100 (users)" into buf, for messages. */
const char *sluice_file_group(gid_t gid, char *buf, size_t len);

#endif /* SLUICE_UTIL_FILE_H */
