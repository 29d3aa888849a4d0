/* segv.c - tl_kv_import segfaults on the envelope of case crash-import (see fault_import.h). */
#include "fault_import.h"

/* Not NULL, and volatile: a compiler may turn a store through a known NULL into a trap
 * instruction (SIGILL); this must be a genuine invalid access, SIGSEGV. */
static volatile uintptr_t wild_address = 16;

static void fault(const uint8_t *env, size_t len)
{
    (void)env;
    (void)len;
    *(volatile uint32_t *)wild_address = 1;
}

FAULTY_IMPORT(TRIGGER_SEGV)
