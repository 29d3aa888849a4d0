/* hang.c - tl_kv_import never returns on the envelope of case hang-import (fault_import.h). */
#include "fault_import.h"

static void fault(const uint8_t *env, size_t len)
{
    (void)env;
    (void)len;
    volatile int spinning = 1; /* volatile: the loop may not be assumed to end */
    while (spinning) {
    }
}

FAULTY_IMPORT(TRIGGER_HANG)
