# Declarations shared by the interpreter and the Python mirror of the bytecode.  Declarations
# only: the interpreter is _core.pyx, the runtime is csrc/runtime.c.
from libc.stdint cimport int64_t


# The one definition of the opcodes.  Low byte: the instruction's width in int64 words
# (opcode word included), so the interpreter and the disassembler advance the same way.
# Python sees this enum as fastlaunch._launch.Opcode.
cpdef enum Opcode:
    ALLOC = 0x0103    # ALLOC slot nbytes           slot <- temporary of nbytes from the pool
    FREE = 0x0202     # FREE slot                   return slot's temporary to the pool
    BIND = 0x0304     # BIND args_at list_at count  argwords[args_at+k] <- slots[lists[list_at+k]]
    LAUNCH = 0x0404   # LAUNCH kernel n args_at     run kernel over [0, n) with &argwords[args_at]
    CHECK = 0x0502    # CHECK slot                  stop with STATUS_INDEX_ERROR if the flag
                      #                             that slot points to was raised by a kernel


# Status codes of the interpreter's run loop (0 is success).
cpdef enum Status:
    STATUS_OK = 0
    STATUS_NO_MEMORY = 1
    STATUS_BAD_OPCODE = 2
    STATUS_INDEX_ERROR = 3


cdef extern from "csrc/runtime.h" nogil:
    ctypedef void (*fl_kernel_fn)(int64_t start, int64_t end, int64_t *args)
    void fl_null_kernel(int64_t start, int64_t end, int64_t *args)
    int fl_pool_start(int nthreads)
    void fl_pool_stop()
    int fl_pool_threads()
    void fl_set_parallel_threshold(int64_t work)
    int64_t fl_get_parallel_threshold()
    void fl_set_spin_us(int64_t us)
    void fl_launch(fl_kernel_fn fn, int64_t n, int64_t work_per_item, int64_t *args)
    void *fl_mem_alloc(int64_t nbytes)
    void fl_mem_free(void *ptr)
    void fl_mem_trim()
    int64_t fl_mem_cached_bytes()
    int64_t fl_mem_live_bytes()
