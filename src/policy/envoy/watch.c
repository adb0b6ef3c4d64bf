/*
 * watch.c -- the envoy config directory as the loader and the
 * watcher both see it: one walk (sluice_envoy_walk()) decides which files
 * are read and which are skipped, so the watcher's stamp changes exactly
 * when what the loader would read does.
 *
 * Polled rather than watched with inotify: a Kubernetes ConfigMap volume
 * changes by swapping the "..data" symlink, which an inotify watch on the
 * files' old targets never sees, and RUNTIME_ROOT itself may be a
 * symlink swapped to another directory.  A stamp over what the loader
 * would read -- the directory's real path, and each YAML file's path,
 * device, inode, size and times as stat() (through symlinks) reports
 * them -- changes whenever any of that does.
 */
#include "policy/envoy/config.h"
#include "policy/envoy/internal.h"
#include "util/invariant.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* --------------------------------------------------------------- the walk */

static int is_yaml_name(const char *n)
{
	size_t len = strlen(n);

	return (len > 5 && strcmp(n + len - 5, ".yaml") == 0) ||
	       (len > 4 && strcmp(n + len - 4, ".yml") == 0);
}

typedef struct walk_s {
	sluice_envoy_file_cb file;
	sluice_envoy_skip_cb skip;
	void *arg;
	/* The directories from the top down to the one being read, by
	 * device and inode: a symlink back up is a loop, not a subtree. */
	dev_t devs[SLUICE_ENVOY_MAX_DIR_DEPTH + 1];
	ino_t inos[SLUICE_ENVOY_MAX_DIR_DEPTH + 1];
} walk_t;

static void skip(walk_t *w, const char *path, const char *why)
{
	if (w->skip)
		w->skip(w->arg, path, why);
}

/* Reads dir (at depth `depth`, its own stat in st); 0, or the first
 * nonzero a callback returned, or -1 (errno) when the top directory
 * cannot be read (a nested one that cannot is skipped). */
static int walk_dir(walk_t *w, const char *dir, const struct stat *st,
		    unsigned depth)
{
	char path[PATH_MAX];
	struct dirent *de;
	DIR *dp;
	int rc = 0;
	unsigned i;

	SLUICE_ASSERT(depth <= SLUICE_ENVOY_MAX_DIR_DEPTH);
	for (i = 0; i < depth; i++)
		if (w->devs[i] == st->st_dev && w->inos[i] == st->st_ino) {
			skip(w, dir, "a directory that leads back up (a loop)");
			return 0;
		}
	w->devs[depth] = st->st_dev;
	w->inos[depth] = st->st_ino;
	if (!(dp = opendir(dir))) {
		if (depth == 0)
			return -1;
		skip(w, dir, "a directory that cannot be read");
		return 0;
	}
	while (!rc && (de = readdir(dp))) {
		struct stat est;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir,
				     de->d_name) >= sizeof(path)) {
			skip(w, dir, "an entry whose path is too long");
			continue;
		}
		/* Dot entries are skipped: a Kubernetes ConfigMap volume
		 * holds "..data" and "..2026_..." (the same files again)
		 * beside the files' symlinks. */
		if (de->d_name[0] == '.') {
			skip(w, path, "a dot file");
			continue;
		}
		if (stat(path, &est) < 0) {
			skip(w, path, "a dangling link or unreadable entry");
			continue;
		}
		if (S_ISDIR(est.st_mode)) {
			/* envoyproxy/ratelimit (goruntime) reads the files
			 * of nested folders too. */
			if (depth == SLUICE_ENVOY_MAX_DIR_DEPTH) {
				skip(w, path, "a directory nested too deep");
				continue;
			}
			rc = walk_dir(w, path, &est, depth + 1);
			continue;
		}
		if (!S_ISREG(est.st_mode)) {
			skip(w, path, "not a regular file");
			continue;
		}
		if (!is_yaml_name(de->d_name)) {
			skip(w, path, "not a .yaml or .yml file");
			continue;
		}
		rc = w->file(w->arg, path, &est);
	}
	closedir(dp);
	return rc;
}

int sluice_envoy_walk(const char *dir, sluice_envoy_file_cb file,
		      sluice_envoy_skip_cb skip_cb, void *arg)
{
	walk_t w = {.file = file, .skip = skip_cb, .arg = arg};
	struct stat st;

	if (stat(dir, &st) < 0)
		return -1;
	if (!S_ISDIR(st.st_mode)) {
		errno = ENOTDIR;
		return -1;
	}
	return walk_dir(&w, dir, &st, 0);
}

/* -------------------------------------------------------------- the stamp */

static uint64_t mix(uint64_t h, const void *p, size_t n)
{
	const unsigned char *b = p;
	size_t i;

	for (i = 0; i < n; i++)
		h = (h ^ b[i]) * 1099511628211ull; /* FNV-1a */
	return h;
}

/* Sums the files' hashes so that readdir()'s order does not matter. */
static int stamp_file(void *arg, const char *path, const struct stat *st)
{
	uint64_t *sum = arg, f = 1469598103934665603ull;

	f = mix(f, path, strlen(path));
	f = mix(f, &st->st_dev, sizeof(st->st_dev));
	f = mix(f, &st->st_ino, sizeof(st->st_ino));
	f = mix(f, &st->st_size, sizeof(st->st_size));
	f = mix(f, &st->st_mtim, sizeof(st->st_mtim));
	f = mix(f, &st->st_ctim, sizeof(st->st_ctim));
	*sum += f;
	return 0;
}

uint64_t sluice_envoy_dir_stamp(const char *dir)
{
	char real[PATH_MAX];
	uint64_t h = 1469598103934665603ull, sum = 0;

	if (!realpath(dir, real))
		return 1; /* missing: a stamp of its own */
	h = mix(h, real, strlen(real));
	if (sluice_envoy_walk(real, stamp_file, NULL, &sum) < 0)
		return h ^ 2;
	return mix(h, &sum, sizeof(sum));
}
