/*
 * overflow.c - tl_kv_import reads one byte past the envelope it was given on the envelope of
 * case overflow-import (fault_import.h): the classic bug of a reader trusting its own length
 * arithmetic. Harmless to the eye; built with -fsanitize=address (and run by the adapter with
 * an exactly sized buffer) it is a heap-buffer-overflow.
 */
#include "fault_import.h"

static void fault(const uint8_t *env, size_t len)
{
    volatile uint8_t past_the_end = env[len];
    (void)past_the_end;
}

FAULTY_IMPORT(TRIGGER_OVERFLOW)
