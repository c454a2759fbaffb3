// @ts-check
// The API's answers as the page reads them: the same objects as the TypedDicts of
// memlens/views/web/answers.py, key for key (tests/view/test_view_answers.py compares the
// two). No code: modules name these in JSDoc, `import("./types.js").ChartAnswer`, and
// scripts/check.sh type-checks them with strict `tsc` (jsconfig.json). An optional key is
// `[name]`.

// ---- /api/meta
/**
 * @typedef {object} MetaPeak
 * @property {number} peak_event_index
 * @property {number | null} peak_time_us
 * @property {number} peak_active_bytes
 * @property {number} peak_reserved_bytes
 */
/**
 * @typedef {object} OomEntry
 * @property {number} event
 * @property {number | null} time_us
 * @property {number} requested_bytes
 * @property {number} device_free_bytes
 */
/**
 * @typedef {object} MetaDevice
 * @property {number} device
 * @property {number} n_events
 * @property {number} n_allocations
 * @property {number[] | null} time_range
 * @property {MetaPeak} peak
 * @property {number} stream_lanes
 * @property {OomEntry[]} ooms
 */
/**
 * @typedef {object} MetaSnapshot
 * @property {number} index
 * @property {string} name
 * @property {number} default_device
 * @property {MetaDevice[]} devices
 * @property {string[]} warnings
 */
/**
 * @typedef {object} MetaAnswer
 * @property {MetaSnapshot[]} snapshots
 */

// ---- /api/d/{device}/view and /segments
/**
 * @typedef {object} XRange
 * @property {"event" | "time"} [mode]
 * @property {number} [e0]
 * @property {number} [e1]
 * @property {number} [t0]
 * @property {number} [t1]
 */
/**
 * @typedef {object} Bands
 * @property {number[]} row
 * @property {number[]} c0
 * @property {number[]} c1
 * @property {number[]} run_start
 * @property {number[]} run_col
 * @property {number[]} run_off
 * @property {number[]} size
 * @property {number[]} group
 * @property {number[]} [flags]
 * @property {number[]} [match]
 * @property {string[]} [address]
 */
/**
 * @typedef {object} Small
 * @property {number[]} offset
 * @property {number[]} bytes
 * @property {number[]} count
 * @property {number} max_size
 * @property {number} min_size
 * @property {number[]} cut_count
 * @property {number[]} cut_bytes
 */
/**
 * @typedef {object} Lane
 * @property {string} stream
 * @property {number} base
 * @property {number} top
 * @property {Small} small
 */
/**
 * @typedef {object} AddressHit
 * @property {number} row
 * @property {string} address
 * @property {number} size
 * @property {number} alloc_event
 * @property {number} free_event
 */
/**
 * @typedef {object} AddressHits
 * @property {number} total
 * @property {AddressHit[]} hits
 */
/**
 * @typedef {object} ChartAnswer
 * @property {"allocations" | "segments"} kind
 * @property {XRange} x
 * @property {number} width
 * @property {number} height
 * @property {number[]} bounds
 * @property {number[]} sample
 * @property {number[]} active
 * @property {number[]} reserved
 * @property {number} ymin
 * @property {number} ymax
 * @property {number} bytes_per_px
 * @property {Bands} bands
 * @property {Small} small
 * @property {string[]} groups
 * @property {number[]} group_keys
 * @property {number[]} [times]
 * @property {AddressHits} [address_hits]
 * @property {Lane[]} [lanes]
 */

// ---- /api/d/{device}/alloc/{row}
/**
 * @typedef {object} EventInfo
 * @property {number} event
 * @property {number | null} time_us
 */
/**
 * @typedef {object} StackFrame
 * @property {string} filename
 * @property {number} line
 * @property {string} name
 * @property {"python" | "cpp" | "noise"} kind
 */
/**
 * @typedef {object} AllocationAnswer
 * @property {number} row
 * @property {number} size
 * @property {string} address
 * @property {number} version
 * @property {EventInfo | null} alloc
 * @property {EventInfo | null} free_requested
 * @property {EventInfo | null} free
 * @property {string} stream
 * @property {number[] | null} pool
 * @property {string | null} compile_context
 * @property {string | null} user_metadata
 * @property {string | null} forward_frames
 * @property {string[]} flags
 * @property {boolean} stack_from_free
 * @property {StackFrame[]} frames
 * @property {StackFrame[] | null} free_frames
 */

// ---- /api/d/{device}/live
/**
 * @typedef {object} TreeNode
 * @property {string} label
 * @property {number} bytes
 * @property {number} count
 * @property {TreeNode[]} children
 * @property {StackFrame} [frame]
 */
/**
 * @typedef {object} LiveAnswer
 * @property {number} event
 * @property {number | null} time_us
 * @property {number} active
 * @property {number} reserved
 * @property {TreeNode} tree
 */

// ---- /api/d/{device}/state
/**
 * @typedef {object} DrawnBlock
 * @property {string} address
 * @property {number} version
 * @property {number} size
 * @property {"active_allocated" | "active_pending_free"} state
 * @property {number} row
 * @property {number} offset
 */
/**
 * @typedef {object} DrawnSegment
 * @property {string} address
 * @property {number} size
 * @property {number} stream
 * @property {boolean} is_expandable
 * @property {number} free_bytes
 * @property {number} largest_free_bytes
 * @property {DrawnBlock[]} blocks
 * @property {number} blocks_total
 * @property {number[] | null} pool
 */
/**
 * @typedef {object} StateAnswer
 * @property {number} event
 * @property {number | null} time_us
 * @property {string | null} action
 * @property {number} active_bytes
 * @property {number} reserved_bytes
 * @property {number} device
 * @property {number} segments_bytes
 * @property {number} allocated_bytes
 * @property {number} n_segments
 * @property {number} n_blocks
 * @property {number} blocks_outside_segments
 * @property {number} free_bytes
 * @property {number} largest_free_bytes
 * @property {number} fragmentation
 * @property {number} rounding_waste_bytes
 * @property {DrawnSegment[]} segments
 * @property {number} segments_shown
 * @property {number} blocks_shown
 * @property {string[][]} settings
 * @property {number} [inconsistencies]
 */

// ---- /api/d/{device}/annotations
/**
 * @typedef {object} Span
 * @property {string} name
 * @property {number} t0
 * @property {number} t1
 * @property {number} e0
 * @property {number} e1
 * @property {number} depth
 * @property {boolean} inferred
 */
/**
 * @typedef {object} AnnotationsAnswer
 * @property {Span[]} spans
 * @property {boolean} truncated
 */

// ---- /api/d/{device}/pools
/**
 * @typedef {object} PoolEnvelope
 * @property {number[] | null} pool
 * @property {number} peak_bytes
 * @property {number} peak_count
 * @property {number} share
 * @property {number} max_bytes
 * @property {number[]} envelope
 */
/**
 * @typedef {object} StreamEnvelope
 * @property {string} stream
 * @property {number} peak_bytes
 * @property {number} peak_count
 * @property {number} share
 * @property {number} max_bytes
 * @property {number[]} envelope
 */
/**
 * @typedef {object} SizeEnvelope
 * @property {string} size_class
 * @property {number} max_bytes
 * @property {number[]} envelope
 */
/**
 * @typedef {object} PoolsAnswer
 * @property {number} n_events
 * @property {number} peak_event
 * @property {PoolEnvelope[]} pools
 * @property {StreamEnvelope[]} streams
 * @property {SizeEnvelope[]} segment_sizes
 */

// ---- /api/compare
/**
 * @typedef {object} ComparePeak
 * @property {number} device
 * @property {number} peak_bytes
 * @property {number} peak_event
 * @property {number} peak_reserved_bytes
 */
/**
 * @typedef {object} SiteChange
 * @property {string | null} filename
 * @property {number | null} line
 * @property {string | null} name
 * @property {string} site
 * @property {number} a_bytes
 * @property {number} b_bytes
 * @property {number} change
 * @property {number} a_count
 * @property {number} b_count
 * @property {"both" | "only_a" | "only_b"} status
 * @property {string} key
 */
/**
 * @typedef {object} Figure
 * @property {string} name
 * @property {number} a
 * @property {number} b
 * @property {number} change
 * @property {number | null} change_pct
 */
/**
 * @typedef {object} CompareAnswer
 * @property {string[]} names
 * @property {ComparePeak[]} peaks
 * @property {SiteChange[]} sites
 * @property {number} sites_total
 * @property {Figure[]} figures
 */

// ---- /api/d/{device}/summary: `memlens summary`'s DeviceSummary (analysis/results.py), the
// keys the page reads
/**
 * @typedef {object} DeviceSummary
 * @property {number} peak_active_bytes
 * @property {number} peak_reserved_bytes
 * @property {number} baseline_bytes
 * @property {number} end_active_bytes
 * @property {number} trace_entries
 * @property {number} allocations
 * @property {number | null} duration_s
 * @property {boolean} truncated
 * @property {boolean} starts_mid_run
 * @property {number} preexisting_freed_in_trace
 */

// ---- any endpoint, on an error (HTTP 400 or 500)
/**
 * @typedef {object} ErrorAnswer
 * @property {string} error
 */

export {};
