# Declarations shared by the interpreters and the Python mirror of the bytecode.  Declarations
# only: the interpreters are _core.pyx (host) and the backends' own modules, the host runtime
# is csrc/runtime.c.  Python sees every cpdef enum here through fastlaunch._launch.
from libc.stdint cimport int64_t


# The one definition of the opcodes.  Low byte: the instruction's width in int64 words
# (opcode word included), so the interpreters and the disassembler advance the same way.
cpdef enum Opcode:
    ALLOC = 0x0103    # ALLOC slot nbytes           slot <- temporary of nbytes (in the slot's space)
    FREE = 0x0202     # FREE slot                   return slot's temporary to its pool
    BIND = 0x0304     # BIND args_at list_at count  argwords[args_at+k] <- slots[lists[list_at+k]]
    LAUNCH = 0x0404   # LAUNCH kernel n args_at     run kernel over [0, n) with &argwords[args_at]
    CHECK = 0x0502    # CHECK slot                  stop with STATUS_KERNEL_ERROR if a kernel
                      #                             raised a KernelError bit in slot's word
    TO_DEVICE = 0x0604  # TO_DEVICE dst src nbytes  copy host slot src to device slot dst
    TO_HOST = 0x0704    # TO_HOST dst src nbytes    copy device slot src to host slot dst
    POLL = 0x0801     # POLL                        stop with STATUS_INTERRUPTED if a signal
                      #                             (Ctrl-C) arrived: long programs only
    LIBCALL = 0x1019  # LIBCALL routine b1 b2 m n k, then 3 arrays x (slot off sb1 sb2 s0 s1):
                      #   call the executable's library routine (a Routine) over a (b1, b2)
                      #   batch; an unused array has slot -1 and zeros.  A non-zero return
                      #   stops with STATUS_LIBRARY_ERROR (backend_code: the routine's info)

    # ---- loops (fl.iterate) ---------------------------------------------------------------
    # A loop is a do-while: its body runs from a LOOP's target to the LOOP, which jumps back
    # while its counter (a slot word) is below the count.  Carried state lives in ALIAS
    # slots: pointers to buffers that other slots own, moved around without copying.
    MOVE = 0x0903     # MOVE dst src                slots[dst] <- slots[src] (dst an alias)
    ROTATE = 0x0A04   # ROTATE read write spare     read <- write; write <-> spare: the buffer
                      #                             just written is read next, the other one
                      #                             is written (ping-pong of carried state)
    ROW = 0x0B06      # ROW dst src ctr every stride  slots[dst] <- slots[src] +
                      #                             (slots[ctr] / every) * stride (bytes)
    COPY = 0x0C04     # COPY dst src nbytes         copy nbytes between two slots in the kernels' space
                      #                             (nothing when both hold the same address)
    SET = 0x0D03      # SET slot value              slots[slot] <- value (a loop counter)
    LOOP = 0x0E04     # LOOP ctr count target       slots[ctr] += 1; jump back to target
                      #                             while slots[ctr] < count
    BREAK_IF = 0x0F03  # BREAK_IF flag target       jump forward to target if the byte at
                       #                            slots[flag] is nonzero (fl.iterate's until=)
    NEXT = 0x1104     # NEXT ctr count target       slots[ctr] += 1; jump forward to target
                      #                             when slots[ctr] >= count: the end of one
                      #                             iteration inside a body that runs several
    JUMP = 0x1202     # JUMP target                 jump forward to target


# Status codes of an interpreter's run loop (0 is success).
cpdef enum Status:
    STATUS_OK = 0
    STATUS_NO_MEMORY = 1
    STATUS_BAD_OPCODE = 2
    STATUS_KERNEL_ERROR = 3       # a CHECK found KernelError bits (kernel.KernelError)
    STATUS_BACKEND_ERROR = 4      # a driver call failed; RunState.backend_code says which
    STATUS_INTERRUPTED = 5        # a POLL saw a pending signal
    STATUS_LIBRARY_ERROR = 6      # a LIBCALL failed (a singular matrix...); backend_code: info


# Library routines a LIBCALL names (the index into the executable's library table; one per
# operation and dtype).  What each reads and writes: bytecode.ROUTINES.
cpdef enum Routine:
    LIB_GEMM_F32 = 0      # C[b] = A[b] @ B[b]      A m x k, B k x n, C m x n
    LIB_GEMM_F64 = 1
    LIB_INV_F32 = 2       # X[b] = inv(A[b])        A, X m x m (X C-contiguous)
    LIB_INV_F64 = 3
    LIB_SOLVE_F32 = 4     # X[b] = solve(A[b], B[b]) A m x m, B, X m x n
    LIB_SOLVE_F64 = 5
    LIB_DET_F32 = 6       # X[b] = det(A[b])        X 1 x 1
    LIB_DET_F64 = 7
    LIB_SLOGDET_F32 = 8   # X[b] = (sign, log|det|) X 1 x 2
    LIB_SLOGDET_F64 = 9
    LIB_CHOLESKY_F32 = 10 # X[b] = cholesky(A[b])   lower; X m x m
    LIB_CHOLESKY_F64 = 11
    LIB_EIGH_F32 = 12     # X[b] = (w; V)           X (m+1) x m: row 0 eigenvalues, then V
    LIB_EIGH_F64 = 13
    LIB_SVD_F32 = 14      # X[b] = (s; U; Vh)       k: 0 s only (X 1 x min), 1 reduced, 2 full U/Vh
    LIB_SVD_F64 = 15      #                         (bytecode.ROUTINES: the packed shape)
    LIB_LSTSQ_F32 = 16    # X[b] = (x; s; rank)     A = [a | b] m x (n+k), Y = rcond 1 x 1,
    LIB_LSTSQ_F64 = 17    #                         X (n+2) x max(k, min(m, n), 1)
    LIB_COUNT = 18


# Memory spaces of slots.  A backend's kernels read and write one space; values cross
# spaces only through TO_DEVICE / TO_HOST.
cpdef enum Space:
    SPACE_HOST = 0
    SPACE_DEVICE = 1


# What a slot holds (bytecode.SlotInfo.role names them by these names, lower-cased).
cpdef enum SlotRole:
    ROLE_INPUT = 0      # an argument array, bound from the call
    ROLE_PARAM = 1      # an argument scalar: its bits are the slot word
    ROLE_CONST = 2      # a captured array, owned by the executable
    ROLE_OUTPUT = 3     # a fresh result array, allocated per call before the run
    ROLE_TEMP = 4       # memory between ALLOC and FREE
    ROLE_STATUS = 5     # the call's error word (KernelError bits)
    ROLE_RNG = 6        # the call's random key: a scalar word the executable sets per call
    ROLE_ALIAS = 7      # (loops) a pointer into a buffer another slot owns: set by MOVE,
                        # ROTATE or ROW, never allocated or freed through it
    ROLE_COUNTER = 8    # (loops) a loop counter: an integer word set by SET, stepped by LOOP
                        # and NEXT


# How a kernel takes one argument word.
cpdef enum ArgKind:
    ARG_BUFFER = 0      # a pointer
    ARG_SCALAR = 1      # a value (int64 or float64 bits)
    ARG_STATUS = 2      # the pointer to the error word


# Result leaves: what each element of the returned structure is.
cpdef enum ResultKind:
    RESULT_NEW = 0      # output array k (as a NumPy scalar when it is a 0-d scalar result)
    RESULT_INPUT = 1    # argument leaf k returned as is (an array updated in place)
    RESULT_VALUE = 2    # a constant Python value from the trace


# How the result leaves are put together.
cpdef enum ResultStructure:
    STRUCT_LEAF = 0     # one leaf
    STRUCT_TUPLE = 1    # a flat tuple of leaves
    STRUCT_TREE = 2     # anything else: the result tree's unflatten


# Where a run starts and where it stopped (pc of the failing instruction, for error messages).
cdef struct RunState:
    int64_t start         # 0, or just after the POLL an interrupted run stopped at, whose
                          # slots (temporaries included) are passed back as it left them
    int64_t pc
    int64_t backend_code


cdef extern from "csrc/runtime.h" nogil:
    int fl_runtime_init()
    int fl_configure(int nthreads, int64_t pool_limit_bytes)
    int fl_max_threads()
    ctypedef void (*fl_kernel_fn)(int64_t start, int64_t end, int64_t *args)
    void fl_null_kernel(int64_t start, int64_t end, int64_t *args)
    int fl_pool_start(int nthreads)
    void fl_pool_stop()
    int fl_pool_threads()
    void fl_set_parallel_threshold(int64_t work)
    int64_t fl_get_parallel_threshold()
    void fl_set_spin_us(int64_t us)
    void fl_pool_park()
    void fl_launch(fl_kernel_fn fn, int64_t n, int64_t work_per_item, int64_t threads,
                   int64_t *args)
    void fl_launch_inline(fl_kernel_fn fn, int64_t n, int64_t work_per_item, int64_t threads,
                          int64_t *args)
    void *fl_mem_alloc(int64_t nbytes)
    void fl_mem_free(void *ptr)
    void fl_mem_trim()
    int64_t fl_mem_cached_bytes()
    int64_t fl_mem_live_bytes()


cdef extern from "csrc/slotops.h" nogil:
    # the instructions every interpreter runs alike; ins: the instruction (operands after it)
    void fl_op_bind(const int64_t *ins, const int64_t *lists, const int64_t *slots,
                    int64_t *argwords)
    void fl_op_move(const int64_t *ins, int64_t *slots)
    void fl_op_rotate(const int64_t *ins, int64_t *slots)
    void fl_op_row(const int64_t *ins, int64_t *slots)
    void fl_op_set(const int64_t *ins, int64_t *slots)
    bint fl_op_loop(const int64_t *ins, int64_t *slots)   # true: jump back to ins[3]
    bint fl_op_next(const int64_t *ins, int64_t *slots)   # true: jump forward to ins[3]


cdef extern from "csrc/library.h" nogil:
    # a library routine: operands = the LIBCALL's words after the routine; 0 or an error code
    ctypedef int (*fl_library_fn)(const int64_t *operands, const int64_t *slots)
    int fl_library_null(const int64_t *operands, const int64_t *slots)


cdef extern from "csrc/interrupt.h" nogil:
    int fl_interrupt_arm(int this_thread_handles)   # chain our SIGINT flag in front of the
                                                    # current handler; arm this thread's POLLs
    int fl_interrupt_pending()      # a cheap flag read, safe without the GIL
    void fl_interrupt_clear()
