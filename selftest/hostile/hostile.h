/*
 * hostile.h - the bundled reference C library with some of its functions taken over by a
 * hostile implementation under test (selftest/test_hostile.py).
 *
 * A source defines HOSTILE_IMPORT, HOSTILE_EXPORT and/or HOSTILE_POOL_CREATE, includes this
 * header, and defines that function itself with the signature of abi/tl_kv.h. The reference's
 * own stays callable as tl_kv_import_reference, tl_kv_export_reference or
 * tl_kv_pool_create_reference, so a hostile function can misbehave and still do the real work;
 * every function it does not take over is the reference's. (selftest/faulty/fault_import.h does
 * the same for tl_kv_import alone, faulting on chosen envelopes; these fault on every call.)
 */
#ifndef HOSTILE_H
#define HOSTILE_H

/* fork, _exit, sleep and open are POSIX: -std=c11 alone does not declare them. */
#define _POSIX_C_SOURCE 200809L

#ifdef HOSTILE_IMPORT
#define tl_kv_import tl_kv_import_reference
#endif
#ifdef HOSTILE_EXPORT
#define tl_kv_export tl_kv_export_reference
#endif
#ifdef HOSTILE_POOL_CREATE
#define tl_kv_pool_create tl_kv_pool_create_reference
#endif

#include "../../reference/clib/tl_kv_ref.c"

#undef tl_kv_import
#undef tl_kv_export
#undef tl_kv_pool_create

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

/* Where a library that forks appends the pid of each child, one per line, so that the test can
 * check afterwards that none outlived the run. Unset: nothing is recorded. */
#define HOSTILE_PIDS_ENV "TLKV_HOSTILE_PIDS"

static inline void hostile_record_pid(pid_t pid)
{
    const char *path = getenv(HOSTILE_PIDS_ENV);
    if (path == NULL || *path == '\0')
        return;
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT, 0644);
    if (fd < 0)
        return;
    char line[32];
    int n = snprintf(line, sizeof line, "%ld\n", (long)pid);
    if (n > 0 && write(fd, line, (size_t)n) != n) {
        /* nothing to do: the test then misses one pid, and says so by its count */
    }
    close(fd);
}

/* Fork a child that keeps every inherited file descriptor (the worker's pipes among them) and
 * sleeps for minutes: a stray the suite must not leave behind. The parent records its pid. */
static inline void hostile_fork_sleeper(void)
{
    pid_t child = fork();
    if (child == 0) {
        sleep(300);
        _exit(0);
    }
    if (child > 0)
        hostile_record_pid(child);
}

#endif /* HOSTILE_H */
