/*
 * statuses.c - the reference with negative-errno status numbers instead of the contract's,
 * for the status-profile self-test; statuses.yaml is the profile that maps them back.
 */
#include "tl_kv.h"

/* tl_kv.h is include-guarded, so the reference below sees these numbers. */
#undef TL_EINVAL
#undef TL_ENOMEM
#undef TL_EFORMAT
#undef TL_ESHAPE
#undef TL_ENOTFOUND
#define TL_EINVAL    (-22) /* EINVAL */
#define TL_ENOMEM    (-12) /* ENOMEM */
#define TL_EFORMAT   (-74) /* EBADMSG */
#define TL_ESHAPE    (-33) /* EDOM */
#define TL_ENOTFOUND (-2)  /* ENOENT */

#include "../../reference/clib/tl_kv_ref.c"
