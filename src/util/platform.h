/*
 * platform.h -- the one guard over what only Linux has.
 *
 * libsluice is POSIX C, with three exceptions that need Linux:
 *   - the shared-memory store (store/shm*.c): robust process-shared
 *     mutexes (a process that dies holding a shard's lock must not leave
 *     the others waiting), pthread_mutex_consistent() and
 *     pthread_mutex_timedlock(), posix_fallocate() on a tmpfs;
 *   - getrandom() (elsewhere getentropy(), which POSIX 2024, the BSDs and
 *     macOS have);
 *   - socket flags and hints: SOCK_NONBLOCK | SOCK_CLOEXEC at socket(),
 *     MADV_HUGEPAGE (elsewhere fcntl(), util/socket.c).
 * Each is under `#if SLUICE_LINUX`; on other systems the shared-memory
 * store is refused at open with a message saying so, and the rest takes
 * the portable calls.
 *
 * Building with -DSLUICE_PORTABLE=1 takes the other side on Linux too, so
 * that the side macOS and the BSDs compile is compiled and tested here
 * (CMake's SLUICE_PORTABLE option; SLUICE_PORTABLE=1 for the Node
 * package's build).
 */
#ifndef SLUICE_UTIL_PLATFORM_H
#define SLUICE_UTIL_PLATFORM_H

#if defined(__linux__) && !(defined(SLUICE_PORTABLE) && SLUICE_PORTABLE)
#define SLUICE_LINUX 1
#else
#define SLUICE_LINUX 0
#endif

/* Why the shared-memory store is refused where SLUICE_LINUX is 0. */
#define SLUICE_SHM_UNSUPPORTED                                                 \
	"the shared-memory store needs Linux (robust process-shared "          \
	"mutexes); on this system use the memory or the Redis store"

#endif /* SLUICE_UTIL_PLATFORM_H */
