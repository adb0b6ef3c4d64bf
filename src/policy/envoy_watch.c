/*
 * envoy_watch.c -- noticing that the envoy config directory changed.
 *
 * Polled rather than watched with inotify: a Kubernetes ConfigMap volume
 * changes by swapping the "..data" symlink, which an inotify watch on the
 * files' old targets never sees, and RUNTIME_ROOT itself may be a
 * symlink swapped to another directory.  A stamp over what the loader
 * would read -- the directory's real path, and each YAML file's name,
 * device, inode, size and times as stat() (through symlinks) reports
 * them -- changes whenever any of that does.
 */
#include "policy/envoy_config.h"

#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static uint64_t mix(uint64_t h, const void *p, size_t n)
{
	const unsigned char *b = p;
	size_t i;

	for (i = 0; i < n; i++)
		h = (h ^ b[i]) * 1099511628211ull; /* FNV-1a */
	return h;
}

/* Sums the files' hashes so that readdir()'s order does not matter. */
uint64_t sluice_envoy_dir_stamp(const char *dir)
{
	char real[PATH_MAX], path[PATH_MAX + 256];
	uint64_t h = 1469598103934665603ull, sum = 0;
	struct dirent *de;
	DIR *dp;

	if (!realpath(dir, real))
		return 1; /* missing: a stamp of its own */
	h = mix(h, real, strlen(real));
	if (!(dp = opendir(real)))
		return h ^ 2;
	while ((de = readdir(dp))) {
		size_t len = strlen(de->d_name);
		struct stat st;
		uint64_t f = 1469598103934665603ull;

		if (de->d_name[0] == '.' ||
		    !((len > 5 && !strcmp(de->d_name + len - 5, ".yaml")) ||
		      (len > 4 && !strcmp(de->d_name + len - 4, ".yml"))))
			continue;
		snprintf(path, sizeof(path), "%s/%s", real, de->d_name);
		if (stat(path, &st) < 0)
			continue;
		f = mix(f, de->d_name, len);
		f = mix(f, &st.st_dev, sizeof(st.st_dev));
		f = mix(f, &st.st_ino, sizeof(st.st_ino));
		f = mix(f, &st.st_size, sizeof(st.st_size));
		f = mix(f, &st.st_mtim, sizeof(st.st_mtim));
		f = mix(f, &st.st_ctim, sizeof(st.st_ctim));
		sum += f;
	}
	closedir(dp);
	return mix(h, &sum, sizeof(sum));
}
