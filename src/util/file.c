/*
 * file.c -- opening the files sluice reads or shares, safely (file.h).
 */
#include "util/file.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *sluice_file_user(uid_t uid, char *buf, size_t len)
{
	char tmp[1024];
	struct passwd pw, *p = NULL;

	if (getpwuid_r(uid, &pw, tmp, sizeof(tmp), &p) == 0 && p)
		snprintf(buf, len, "uid %u (%.64s)", (unsigned)uid, p->pw_name);
	else
		snprintf(buf, len, "uid %u", (unsigned)uid);
	return buf;
}

const char *sluice_file_group(gid_t gid, char *buf, size_t len)
{
	char tmp[1024];
	struct group gr, *g = NULL;

	if (getgrgid_r(gid, &gr, tmp, sizeof(tmp), &g) == 0 && g)
		snprintf(buf, len, "gid %u (%.64s)", (unsigned)gid, g->gr_name);
	else
		snprintf(buf, len, "gid %u", (unsigned)gid);
	return buf;
}

static const char *kind(mode_t m)
{
	return S_ISDIR(m)    ? "a directory"
	       : S_ISFIFO(m) ? "a FIFO"
	       : S_ISSOCK(m) ? "a socket"
	       : S_ISCHR(m)  ? "a character device"
	       : S_ISBLK(m)  ? "a block device"
			     : "not a file";
}

/* The checks on what was opened; 0 or -1 with why. */
static int check(const sluice_file_t *f, unsigned how,
		 const sluice_file_trust_t *trust, char *why, size_t whylen)
{
	const struct stat *st = &f->st;
	gid_t group = trust->group;
	uid_t me = geteuid();
	char a[96], b[96];
	size_t i;

	if (!S_ISREG(st->st_mode)) {
		snprintf(why, whylen, "is %s, not a regular file",
			 kind(st->st_mode));
		return -1;
	}
	if (!(how & SLUICE_FILE_OWNED))
		return 0;
	/* An owner the operator named (a sidecar that writes the files
	 * under its own uid) is trusted as we are. */
	for (i = 0; i < trust->nuids && st->st_uid != trust->uids[i]; i++)
		;
	if (st->st_uid != me && st->st_uid != 0 && i == trust->nuids &&
	    (group == (gid_t)-1 || st->st_gid != group)) {
		snprintf(why, whylen,
			 "is owned by %s, not by %s who runs sluice%s%s%s",
			 sluice_file_user(st->st_uid, a, sizeof(a)),
			 sluice_file_user(me, b, sizeof(b)),
			 me ? " nor root" : "",
			 trust->nuids ? " nor a trusted uid" : "",
			 group == (gid_t)-1 ? ""
					    : " nor in the configured group");
		return -1;
	}
	/* Whoever may write it may rewrite what it says. */
	if (st->st_mode & S_IWOTH) {
		snprintf(why, whylen,
			 "is writable by every user (mode %03o); expected "
			 "chmod o-w",
			 (unsigned)(st->st_mode & 0777));
		return -1;
	}
	if ((how & SLUICE_FILE_RDWR) && (st->st_mode & S_IWGRP) &&
	    (group == (gid_t)-1 || st->st_gid != group)) {
		snprintf(why, whylen,
			 "is writable by %s (mode %03o), which is not the "
			 "configured group; expected chmod g-w",
			 sluice_file_group(st->st_gid, a, sizeof(a)),
			 (unsigned)(st->st_mode & 0777));
		return -1;
	}
	return 0;
}

/* open(2) relative to dirfd, without blocking; may create. */
static int open_fd(int dirfd, const char *path, unsigned how, int follow,
		   int *created)
{
	int flags = (how & SLUICE_FILE_RDWR ? O_RDWR : O_RDONLY) | O_CLOEXEC |
		    O_NONBLOCK | (follow ? 0 : O_NOFOLLOW);
	int fd, tries;

	*created = 0;
	if (!(how & SLUICE_FILE_CREATE))
		return openat(dirfd, path, flags);
	/* Open what is there, else create it exclusively: never O_CREAT on
	 * an existing file (in a sticky directory such as /dev/shm,
	 * fs.protected_regular refuses that even to root, with a message
	 * that would not name the owner).  Bounded: someone racing us with
	 * create and unlink gets an error, not a loop. */
	for (tries = 0; tries < 16; tries++) {
		fd = openat(dirfd, path, flags);
		if (fd >= 0 || errno != ENOENT)
			return fd;
		fd = openat(dirfd, path, flags | O_CREAT | O_EXCL, 0600);
		if (fd >= 0) {
			*created = 1;
			return fd;
		}
		if (errno != EEXIST)
			return fd;
	}
	return -1;
}

int sluice_file_open(sluice_file_t *f, int dirfd, const char *path,
		     unsigned how, gid_t group, char *why, size_t whylen)
{
	sluice_file_trust_t trust = {.group = group};

	return sluice_file_open_trusted(f, dirfd, path, how, &trust, why,
					whylen);
}

int sluice_file_open_trusted(sluice_file_t *f, int dirfd, const char *path,
			     unsigned how, const sluice_file_trust_t *trust,
			     char *why, size_t whylen)
{
	int linked = 0;

	memset(f, 0, sizeof(*f));
	/* First without following: tells (race-free) whether the name is a
	 * symbolic link, which makes the content unquotable. */
	f->fd = open_fd(dirfd, path, how, 0, &f->created);
	if (f->fd < 0 && errno == ELOOP && !(how & SLUICE_FILE_NOFOLLOW)) {
		linked = 1;
		f->fd = open_fd(dirfd, path, how, 1, &f->created);
	}
	if (f->fd < 0) {
		int e = errno;

		if (e == ELOOP)
			snprintf(why, whylen,
				 "is a symbolic link; expected the file "
				 "itself");
		else
			snprintf(why, whylen, "cannot be opened: %s",
				 strerror(e));
		return -1;
	}
	if (fstat(f->fd, &f->st) != 0) {
		snprintf(why, whylen, "cannot be examined: %s",
			 strerror(errno));
		close(f->fd);
		f->fd = -1;
		return -1;
	}
	if (check(f, how, trust, why, whylen) < 0) {
		close(f->fd);
		f->fd = -1;
		return -1;
	}
	f->quotable =
		(f->st.st_mode & S_IROTH) ||
		(f->st.st_uid == geteuid() && !linked && f->st.st_nlink == 1);
	return 0;
}

int sluice_file_read(const char *path, size_t max, unsigned how, char **out,
		     size_t *len, int *quotable, char *why, size_t whylen)
{
	static const sluice_file_trust_t none = {.group = (gid_t)-1};

	return sluice_file_read_trusted(path, max, how, &none, out, len,
					quotable, why, whylen);
}

int sluice_file_read_trusted(const char *path, size_t max, unsigned how,
			     const sluice_file_trust_t *trust, char **out,
			     size_t *len, int *quotable, char *why,
			     size_t whylen)
{
	sluice_file_t f;
	char *buf;
	size_t n = 0, cap;
	ssize_t r;

	*out = NULL;
	*len = 0;
	if (sluice_file_open_trusted(&f, AT_FDCWD, path, how, trust, why,
				     whylen) < 0)
		return -1;
	if ((uint64_t)f.st.st_size > max) {
		snprintf(why, whylen, "is %llu bytes, larger than %zu",
			 (unsigned long long)f.st.st_size, max);
		close(f.fd);
		return -1;
	}
	/* The size may change under us: read until the end, growing the
	 * buffer, to at most max + 1 bytes (then it is too large). */
	cap = (size_t)f.st.st_size + 1;
	buf = malloc(cap + 1);
	for (;;) {
		if (!buf) {
			snprintf(why, whylen, "cannot be read: out of memory");
			goto fail;
		}
		if (n == cap) {
			char *nb;

			if (cap > max)
				break;
			cap = cap * 2 > max + 1 ? max + 1 : cap * 2;
			nb = realloc(buf, cap + 1);
			if (!nb)
				free(buf);
			buf = nb;
			continue;
		}
		r = read(f.fd, buf + n, cap - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			snprintf(why, whylen, "cannot be read: %s",
				 strerror(errno));
			goto fail;
		}
		if (r == 0)
			break;
		n += (size_t)r;
	}
	if (n > max) {
		snprintf(why, whylen, "is larger than %zu bytes", max);
		goto fail;
	}
	close(f.fd);
	buf[n] = '\0';
	*out = buf;
	*len = n;
	if (quotable)
		*quotable = f.quotable;
	return 0;
fail:
	close(f.fd);
	free(buf);
	return -1;
}
