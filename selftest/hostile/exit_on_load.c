/* exit_on_load.c - the reference with a constructor that calls _exit(0) when the library is
 * loaded: the process that loads it ends at once, with the status of success. */
#include "hostile.h"

__attribute__((constructor)) static void leave_at_load(void)
{
    _exit(0);
}
