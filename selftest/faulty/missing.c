/* missing.c - the reference exporting tl_kv_import under another name: a library the adapter
 * must refuse to use, with one line naming the missing symbol. */
#define tl_kv_import tl_kv_import_elsewhere
#include "../../reference/clib/tl_kv_ref.c"
