/* In-network aggregation (INA) for v1model / simple_switch_grpc.
 *
 * The contract this program implements is p4src/README.md; the embedded software target in
 * dataplane/ implements the same text. Names that the controller uses are pinned with @name so
 * the P4Info produced by p4c matches p4src/ina.p4info.txtpb by name.
 *
 * bmv2 constraints shaping the code (see shared notes on bmv2):
 *  - each action is atomic, so the whole read-modify-write of a slot sits in one action, with
 *    unconditional register reads and writes whose values are chosen by ?: expressions;
 *  - a table is applied once per control, so each table has exactly one apply site;
 *  - a packet leaves on port 0 unless dropped: every branch that consumes a packet calls
 *    mark_to_drop explicitly;
 *  - bmv2 has one pipeline: the ingress pipelines of a multi-pipeline ASIC are emulated by a
 *    port -> pipe table and separate register regions per pipe;
 *  - a slot's member bitmap is one register cell, one bit per merged flow, so its width is the
 *    fan-in limit (MAX_FAN_IN); bmv2 takes bit<64> registers and action parameters as they are
 *    (p4c's JSON and bmv2 use arbitrary-width integers), and bmv2's P4Runtime server refuses a
 *    value wider than its parameter (INVALID_ARGUMENT), so no entry names a flow beyond it;
 *  - packet-in/packet-out travel through CPU_PORT (simple_switch_grpc --cpu-port 510) with the
 *    @controller_header headers below; their fields are 16 bits wide so that the headers need
 *    no padding field (a padding field would appear in the P4Info and every PacketOut would
 *    have to carry it).
 */
#include <core.p4>
#include <v1model.p4>

// *** SIZES: the only place they are set in P4 (README "Sizes"). dataplane/frame.py holds the
// same values for the controller and the hosts; tests/dataplane/test_dp_packet.py compares them.
#define K 128
#define MAX_PIPES 4
#define MAX_JOBS 32              // cells of the per-job `forged` counter (job ids 1..31)
#define SLOTS_PER_PIPE 4096
#define MAX_FAN_IN 64            // flows one aggregation point merges: bits of a member bitmap
#define CELLS 16384              // MAX_PIPES * SLOTS_PER_PIPE
#define HALF_BITS 2048           // 16 * K: the K elements as two fields, p4c's widest (2048 bits)
#define VALUE_CELLS 32768        // CELLS * 2: a slot's two halves
#define PORTS 512                // ingress_port is 9 bits
#define STALE_AFTER_US 2000000   // a partial sum untouched this long is abandoned (README 4.2)
#define BMV2_QUEUE_DEPTH 64      // packets simple_switch's egress queue of a port holds by default

// The top bit of each 32-bit lane of half the elements (80000000 K/2 times): the lane-wise sum
// (README 4.2) adds the low 31 bits of every lane at once and sets the top bits apart, so no
// carry crosses into the next lane. Built by the preprocessor: LANES repeats K/2 times.
#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define TWICE(x) CAT(x, x)
#define LANES(x) TWICE(TWICE(TWICE(TWICE(TWICE(TWICE(x))))))
const bit<HALF_BITS> LANE_HIGH = CAT(0x, LANES(80000000));
const bit<HALF_BITS> LANE_LOW = ~LANE_HIGH;

const bit<16> ETHERTYPE_IPV4 = 0x0800;
const bit<16> ETHERTYPE_LLDP = 0x88cc;
const bit<9> CPU_PORT = 510;
const bit<8> PROTO_UDP = 17;
const bit<16> INA_UDP_PORT = 20033;
const bit<16> INA_UDP_LEN = 540;  // 8 (UDP) + 20 (INA header) + 4 * K
const bit<16> SHORT_UDP_LEN = 28;  // 8 (UDP) + 20 (INA header): ACK, PROBE, CONTROL

const bit<8> FLAG_DATA = 0x01;
const bit<8> FLAG_RESULT = 0x02;
const bit<8> FLAG_CONTROL = 0x04;
const bit<8> FLAG_ACK = 0x08;
const bit<8> FLAG_PROBE = 0x10;
// Bit 7 of `flags` is the congestion mark, beside the kind (README "Congestion mark").
const bit<8> FLAG_CONGESTED = 0x80;
const bit<8> FLAG_KIND = 0x7f;

// What the aggregation step decided for a DATA, ACK or PROBE packet.
const bit<4> V_PASS = 0;      // no aggregation here: forward under the packet's own flow id
const bit<4> V_OUT = 1;       // ACK/PROBE at an aggregation point: forward under the outgoing flow id
const bit<4> V_PARTIAL = 2;   // contribution stored, fragment not complete: consumed
const bit<4> V_DONE = 3;      // fan-in reached: the packet carries the sum onward
const bit<4> V_DUP = 4;       // contribution already counted
const bit<4> V_COLLIDE = 5;   // slot busy with another fragment
const bit<4> V_AGAIN = 6;     // a copy of a contribution to a completed slot: the sum onward again
const bit<4> V_NACK = 7;      // loss query, the asker's contribution is missing here: NACK it
const bit<4> V_HELD = 8;      // loss query, the asker's contribution is held here: HELD back
const bit<4> V_QUIET = 9;     // loss query whose round the kept RESULT answered already: dropped
const bit<4> V_RESULT = 10;   // copy or loss query at a completed slot that kept the PS's RESULT

// `count` of the CONTROL that answers a loss query whose asker's contribution is held (a NACK
// has 0): the fragment waits for a peer's.
const bit<16> HELD = 0xFFFF;

// `aux` of a RESULT sent again: no worker takes its round trip as a sample (dataplane/rto.py).
const bit<32> AUX_RETRANSMITTED = 1;

const bit<32> PKT_INSTANCE_TYPE_INGRESS_CLONE = 1;
// `next_node` of the unsolicited NACK a loss query sends for each member missing from the
// partial sum it found (README "Loss query"): the named worker resends at once.
const bit<16> NAMED = 0xFFFF;
const bit<8> FL_CONTROL = 1;  // field list preserved into the collision clone

error { InaBadLength, InaBadFlags }

// The flows merged into a slot, one bit each (the `member` of an `ina_aggregate` entry).
typedef bit<MAX_FAN_IN> bitmap_t;

// *** HEADERS

// Prepended to a frame sent to the controller (PacketIn metadata `ingress_port`).
@controller_header("packet_in")
header packet_in_t {
    bit<16> ingress_port;
}

// Prepended by the target to a frame from the controller (PacketOut metadata `egress_port`).
@controller_header("packet_out")
header packet_out_t {
    bit<16> egress_port;
}

header ethernet_t {
    bit<48> dst_addr;
    bit<48> src_addr;
    bit<16> ether_type;
}

header ipv4_t {
    bit<4> version;
    bit<4> ihl;
    bit<6> dscp;
    bit<2> ecn;
    bit<16> total_len;
    bit<16> identification;
    bit<3> flags;
    bit<13> frag_offset;
    bit<8> ttl;
    bit<8> protocol;
    bit<16> hdr_checksum;
    bit<32> src_addr;
    bit<32> dst_addr;
}

header udp_t {
    bit<16> src_port;
    bit<16> dst_port;
    bit<16> length;
    bit<16> checksum;
}

header ina_t {
    bit<16> job;
    bit<8> task;
    bit<8> flags;
    bit<16> flow_id;
    bit<16> next_node;
    bit<32> frag_id;
    bit<16> count;
    bit<16> k;
    bit<32> aux;
}

// The K int32 elements as two wide fields: the slot adds each lane by lane in a few operations
// (LANE_HIGH), where K fields would each need their own read, add and write.
header ina_data_t {
    bit<HALF_BITS> elems0;
    bit<HALF_BITS> elems1;
}

struct headers_t {
    packet_in_t packet_in;
    packet_out_t packet_out;
    ethernet_t ethernet;
    ipv4_t ipv4;
    udp_t udp;
    ina_t ina;
    ina_data_t ina_data;
}

struct metadata_t {
    bit<8> pipe;
    bit<32> job_cell;   // the `forged` counter's cell of the packet's job (0: out of range)
    bit<2> generation;  // flow_id[15:14]: which plan generation the flow belongs to
    bit<32> slot_base;
    bit<32> slot_count;
    bit<32> slot;
    bit<32> cell;
    bit<4> verdict;
    bit<16> out_flow;
    bit<16> next_node;
    @field_list(1)  // FL_CONTROL
    bit<32> occupant;
    @field_list(1)  // FL_CONTROL: the CONTROL answers a loss query (NACK or HELD)
    bit<1> answer;
    @field_list(1)  // FL_CONTROL: ... with HELD (count 0xFFFF), not a NACK (count 0)
    bit<1> held;
    bit<8> congested;   // the packet's congestion mark (FLAG_CONGESTED or 0), kept apart
    // A loss query that names the members `missing` from a partial sum: it goes down the
    // point's name group, and egress keeps the replica whose rid (member bit) is missing.
    // Not in FL_CONTROL: the answer's clone is no naming replica.
    bit<1> naming;
    bit<16> name_group;
    bitmap_t missing;
    bit<19> mark_depth; // the egress port's `mark_threshold`
}

// *** PARSER
// Malformed INA packets end the parser with an error (PacketTooShort, InaBadLength,
// InaBadFlags); bmv2 then runs ingress with standard_metadata.parser_error set.

parser InaParser(packet_in packet, out headers_t hdr, inout metadata_t meta,
                 inout standard_metadata_t standard_metadata) {
    state start {
        transition select(standard_metadata.ingress_port) {
            CPU_PORT: parse_packet_out;
            default: parse_ethernet;
        }
    }
    state parse_packet_out {
        packet.extract(hdr.packet_out);
        transition parse_ethernet;
    }
    state parse_ethernet {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.ether_type) {
            ETHERTYPE_IPV4: parse_ipv4;
            default: accept;
        }
    }
    state parse_ipv4 {
        packet.extract(hdr.ipv4);
        transition select(hdr.ipv4.ihl, hdr.ipv4.protocol) {
            (5, PROTO_UDP): parse_udp;
            default: accept;
        }
    }
    state parse_udp {
        packet.extract(hdr.udp);
        transition select(hdr.udp.dst_port) {
            INA_UDP_PORT: parse_ina;
            default: accept;
        }
    }
    state parse_ina {
        packet.extract(hdr.ina);
        // The mark is kept apart while ingress looks at the kind; ingress puts it back.
        meta.congested = hdr.ina.flags & FLAG_CONGESTED;
        hdr.ina.flags = hdr.ina.flags & FLAG_KIND;
        verify(hdr.ina.flags == FLAG_DATA || hdr.ina.flags == FLAG_RESULT
               || hdr.ina.flags == FLAG_CONTROL || hdr.ina.flags == FLAG_ACK
               || hdr.ina.flags == FLAG_PROBE,
               error.InaBadFlags);
        // Only a DATA or a RESULT carries the K elements; the other kinds end here.
        bool elements = hdr.ina.flags == FLAG_DATA || hdr.ina.flags == FLAG_RESULT;
        verify(elements ? (hdr.udp.length == INA_UDP_LEN && hdr.ina.k == K)
                        : (hdr.udp.length == SHORT_UDP_LEN && hdr.ina.k == 0),
               error.InaBadLength);
        transition select(hdr.ina.k) {
            0: accept;
            default: parse_ina_data;
        }
    }
    state parse_ina_data {
        packet.extract(hdr.ina_data);
        transition accept;
    }
}

control InaVerifyChecksum(inout headers_t hdr, inout metadata_t meta) {
    apply { }
}

// *** INGRESS

control InaIngress(inout headers_t hdr, inout metadata_t meta,
                   inout standard_metadata_t standard_metadata) {

    // Slot state, one region of SLOTS_PER_PIPE cells per pipe: cell = pipe * SLOTS_PER_PIPE + slot.
    // A slot is free when its bitmap is 0. Internal only: the controller never touches them.
    @name("slot_frag") register<bit<32>>(CELLS) slot_frag;
    @name("slot_tag") register<bit<16>>(CELLS) slot_tag;
    @name("slot_bitmap") register<bitmap_t>(CELLS) slot_bitmap;
    @name("slot_count") register<bit<16>>(CELLS) slot_count;
    @name("slot_values") register<bit<HALF_BITS>>(VALUE_CELLS) slot_values;
    @name("slot_time") register<bit<48>>(CELLS) slot_time;  // last contribution or duplicate
    @name("slot_mark") register<bit<8>>(CELLS) slot_mark;   // OR of the contributions' marks
    // The last loss-query round a completed sum was sent on again for (README 4.2).
    @name("slot_repaired") register<bit<16>>(CELLS) slot_repaired;
    // The highest loss-query round whose missing members a partial sum NACKed (0: none since
    // it opened): they are named once per round, however many peers ask.
    @name("slot_named") register<bit<16>>(CELLS) slot_named;
    // The PS's RESULT that passed this switch, per slot index (README step 3): a RESULT may
    // enter by a port of another pipe than the one(s) its task is summed in, so it is kept
    // where every pipe's cell of that index finds it. result_flow 0: none kept; a contribution
    // taken at the index, in any pipe, clears it.
    @name("result_flow") register<bit<16>>(SLOTS_PER_PIPE) result_flow;
    @name("result_frag") register<bit<32>>(SLOTS_PER_PIPE) result_frag;
    @name("result_task") register<bit<8>>(SLOTS_PER_PIPE) result_task;
    @name("result_count") register<bit<16>>(SLOTS_PER_PIPE) result_count;
    @name("result_mark") register<bit<8>>(SLOTS_PER_PIPE) result_mark;
    @name("result_values") register<bit<HALF_BITS>>(SLOTS_PER_PIPE * 2) result_values;

    // Events the controller observes, indexed by pipe.
    @name("aggregations_completed") counter(MAX_PIPES, CounterType.packets) aggregations_completed;
    @name("collisions") counter(MAX_PIPES, CounterType.packets) collisions;
    @name("duplicates") counter(MAX_PIPES, CounterType.packets) duplicates;
    @name("malformed") counter(MAX_PIPES, CounterType.packets) malformed;
    @name("unknown_job") counter(MAX_PIPES, CounterType.packets) unknown_job;
    // INA packets from a host port whose job is not bound to that port, by the job they
    // claim (README step 2b): the job someone tried to tamper with.
    @name("forged") counter(MAX_JOBS, CounterType.packets) forged;
    // Frames received per front-panel port: the controller's evidence that a link carries
    // traffic even when congestion delays or drops its discovery probes (README step 0).
    @name("port_packets") counter(PORTS, CounterType.packets) port_packets;

    @name("set_pipeline")
    action set_pipeline(bit<8> pipe) {
        meta.pipe = pipe;
    }

    // The ingress pipeline of each port (README step 1).
    @name("port_pipeline")
    table port_pipeline {
        key = { standard_metadata.ingress_port: exact @name("ingress_port"); }
        actions = { set_pipeline; NoAction; }
        default_action = NoAction();
        size = 512;
    }

    @name("mark_host_port")
    action mark_host_port() { }

    // Ports that face a host: only the jobs bound to the port in `host_job` may enter there
    // (README step 2b). Ports between switches are not listed: they carry every job.
    @name("host_port")
    table host_port {
        key = { standard_metadata.ingress_port: exact @name("ingress_port"); }
        actions = { mark_host_port; NoAction; }
        default_action = NoAction();
        size = 512;
    }

    @name("permit_job")
    action permit_job() { }

    // The jobs the hosts behind each host port take part in (README step 2b).
    @name("host_job")
    table host_job {
        key = {
            standard_metadata.ingress_port: exact @name("ingress_port");
            hdr.ina.job: exact @name("job");
        }
        actions = { permit_job; NoAction; }
        default_action = NoAction();
        size = 4096;
    }

    @name("set_job_slots")
    action set_job_slots(bit<32> base, bit<32> count) {
        meta.slot_base = base;
        meta.slot_count = count;
    }

    // Each job's slot region per flow-id generation, the same range in every pipe: job
    // isolation, and a new plan version never meets an old one's partial sums (step 4.1).
    @name("job_slots")
    table job_slots {
        key = {
            hdr.ina.job: exact @name("job");
            meta.generation: exact @name("generation");
        }
        actions = { set_job_slots; NoAction; }
        default_action = NoAction();
        size = 256;
    }

// Half the slot's elements: start from the packet when the slot was free, else add lane by
// lane mod 2^32; write back when the contribution is taken, and put the sum (or, sent again,
// the stored one, or the kept RESULT's) into the packet.
#define AGG_HALF(h) \
        slot_values.read(v, meta.cell * 2 + h); \
        result_values.read(r, meta.slot * 2 + h); \
        e = hdr.ina_data.elems##h; \
        sum = free ? e : (((v & LANE_LOW) + (e & LANE_LOW)) ^ ((v ^ e) & LANE_HIGH)); \
        slot_values.write(meta.cell * 2 + h, take ? sum : v); \
        hdr.ina_data.elems##h = done ? sum : (answer ? r : (resend ? v : e));

    // The whole slot read-modify-write: one action, so bmv2 runs it atomically (README 4.2).
    @name("aggregate")
    action aggregate(bit<16> tag, bitmap_t member, bitmap_t full, bit<16> out_flow,
                     bit<16> next_node, bit<16> name_group) {
        bit<32> frag;
        bit<16> owner;
        bitmap_t bitmap;
        bit<16> stored_count;
        bit<48> touched;
        bit<8> marked;
        bit<16> repaired;
        bit<16> named;
        bit<48> now = standard_metadata.ingress_global_timestamp;
        slot_frag.read(frag, meta.cell);
        slot_tag.read(owner, meta.cell);
        slot_bitmap.read(bitmap, meta.cell);
        slot_count.read(stored_count, meta.cell);
        slot_time.read(touched, meta.cell);
        slot_mark.read(marked, meta.cell);
        slot_repaired.read(repaired, meta.cell);
        slot_named.read(named, meta.cell);
        bit<16> kept_flow;
        bit<32> kept_frag;
        bit<8> kept_task;
        bit<16> kept_count;
        bit<8> kept_mark;
        result_flow.read(kept_flow, meta.slot);
        result_frag.read(kept_frag, meta.slot);
        result_task.read(kept_task, meta.slot);
        result_count.read(kept_count, meta.slot);
        result_mark.read(kept_mark, meta.slot);

        bool is_data = hdr.ina.flags == FLAG_DATA;
        bool stale = now - touched > STALE_AFTER_US;
        bool same = frag == hdr.ina.frag_id && owner == tag;
        bool free = bitmap == 0 || stale;  // abandoned counts as free
        // Completed here less than STALE_AFTER ago (bitmap 0, owner kept): a copy of a counted
        // contribution gets the stored sum again instead of opening a new partial sum.
        bool again = is_data && free && !stale && same;
        bool mine = !free && same;
        bool dup = is_data && mine && (bitmap & member) != 0;
        bool collide = is_data && !free && !mine;
        bool take = is_data && ((free && !again) || (mine && !dup));
        bitmap_t new_bitmap = free ? member : (bitmap | member);
        bool done = take && new_bitmap == full;
        bool freed = hdr.ina.flags == FLAG_ACK && mine;  // a PROBE frees nothing
        bool release = done || freed;
        bit<16> new_count = free ? hdr.ina.count : stored_count + hdr.ina.count;
        bit<8> new_mark = free ? meta.congested : (marked | meta.congested);
        // A loss query (PROBE with its round in `count`): whose loss is it? (README 4.2)
        bool query = hdr.ina.flags == FLAG_PROBE && hdr.ina.count != 0;
        bool q_free = (bitmap == 0 && owner == 0) || stale;
        bool q_done = query && !q_free && same && bitmap == 0;
        // The PS's RESULT for this fragment passed since it completed here: a copy or a new
        // query round gets that RESULT. Without it, a completed slot passes the query on
        // towards the PS (V_OUT): only the PS knows whether the sums above arrived.
        bool kept = kept_flow != 0 && kept_frag == hdr.ina.frag_id && kept_task == hdr.ina.task;
        bool repair = q_done && kept && hdr.ina.count > repaired;
        bool q_held = !q_free && same && bitmap != 0 && (bitmap & member) != 0;
        bool nack = query && (q_free || (same && bitmap != 0 && !q_held));
        bool held = query && q_held;
        bool quiet = q_done && kept && !repair;
        // A query answered at a partial sum of its fragment also names the worker members
        // missing from it, once per round (README "Loss query").
        bool name = query && !q_free && same && bitmap != 0 && hdr.ina.count > named
                    && name_group != 0;
        bitmap_t missing = full & ~bitmap & ~member;
        bool resend = again || repair;  // the stored sum leaves again, or the kept RESULT
        bool answer = resend && kept;

        slot_frag.write(meta.cell, take ? hdr.ina.frag_id : frag);
        // An ACK forgets the owner too: a freed partial sum is not a completed one.
        slot_tag.write(meta.cell, take ? tag : (freed ? 16w0 : owner));
        slot_bitmap.write(meta.cell, release ? (bitmap_t)0 : (take ? new_bitmap : bitmap));
        slot_count.write(meta.cell, take ? new_count : stored_count);
        slot_time.write(meta.cell, (take || dup) ? now : touched);
        slot_mark.write(meta.cell, take ? new_mark : marked);
        slot_repaired.write(meta.cell,
                            (take && free) ? 16w0 : (repair ? hdr.ina.count : repaired));
        slot_named.write(meta.cell, (take && free) ? 16w0 : (name ? hdr.ina.count : named));
        result_flow.write(meta.slot, take ? 16w0 : kept_flow);
        hdr.ina.count = done ? new_count
                      : (answer ? kept_count : (resend ? stored_count : hdr.ina.count));
        // A sum leaves marked if any contribution summed into it was.
        meta.congested = done ? new_mark
                       : (answer ? (kept_mark | meta.congested)
                       : (resend ? (marked | meta.congested) : meta.congested));

        bit<HALF_BITS> v;
        bit<HALF_BITS> e;
        bit<HALF_BITS> sum;
        bit<HALF_BITS> r;
        AGG_HALF(0)
        AGG_HALF(1)

        // Nested conditionals in parentheses: p4c groups an unparenthesised chain left to right.
        meta.verdict = collide ? V_COLLIDE
                     : (nack ? V_NACK
                     : (held ? V_HELD
                     : (answer ? V_RESULT
                     : (quiet ? V_QUIET
                     : (dup ? V_DUP
                     : (again ? V_AGAIN
                     : (done ? V_DONE
                     : (take ? V_PARTIAL
                     : V_OUT))))))));
        // An answer names the queried fragment, a collision's CONTROL the occupying one.
        meta.occupant = (nack || held) ? hdr.ina.frag_id : frag;
        meta.answer = (nack || held) ? 1w1 : 1w0;
        meta.held = held ? 1w1 : 1w0;
        meta.out_flow = answer ? kept_flow : out_flow;
        meta.next_node = answer ? 16w0 : next_node;
        meta.naming = (name && missing != 0) ? 1w1 : 1w0;
        meta.name_group = name_group;
        meta.missing = missing;
    }

    // The PS's RESULT passing down (README step 3) is kept at its fragment's slot index.
    @name("keep_result")
    action keep_result() {
        result_flow.write(meta.slot, hdr.ina.flow_id);
        result_frag.write(meta.slot, hdr.ina.frag_id);
        result_task.write(meta.slot, hdr.ina.task);
        result_count.write(meta.slot, hdr.ina.count);
        result_mark.write(meta.slot, meta.congested);
        result_values.write(meta.slot * 2, hdr.ina_data.elems0);
        result_values.write(meta.slot * 2 + 1, hdr.ina_data.elems1);
    }

    // Where a task's flows entering through a pipe are summed (README step 4.2).
    @name("ina_aggregate")
    table ina_aggregate {
        key = {
            hdr.ina.job: exact @name("job");
            hdr.ina.task: exact @name("task");
            meta.pipe: exact @name("pipe");
            hdr.ina.flow_id: exact @name("flow_id");
        }
        actions = { aggregate; NoAction; }
        default_action = NoAction();
        size = 4096;
    }

    @name("forward")
    action forward(bit<9> port) {
        standard_metadata.egress_spec = port;
    }

    // Explicit per-flow forwarding: every planned path, split ones included (README 4.3).
    @name("ina_forward")
    table ina_forward {
        key = {
            hdr.ina.job: exact @name("job");
            hdr.ina.task: exact @name("task");
            hdr.ina.flow_id: exact @name("flow_id");
        }
        actions = { forward; NoAction; }
        default_action = NoAction();
        size = 4096;
    }

    @name("set_result_group")
    action set_result_group(bit<16> group) {
        standard_metadata.mcast_grp = group;
    }

    // Results go down the reversed aggregation tree (README step 3).
    @name("result_multicast")
    table result_multicast {
        key = {
            hdr.ina.job: exact @name("job");
            hdr.ina.task: exact @name("task");
        }
        actions = { set_result_group; NoAction; }
        default_action = NoAction();
        size = 1024;
    }

    // Control packets and ordinary traffic (README step 5).
    @name("ipv4_lpm")
    table ipv4_lpm {
        key = { hdr.ipv4.dst_addr: lpm @name("dst_addr"); }
        actions = { forward; NoAction; }
        default_action = NoAction();
        size = 1024;
    }

    apply {
        meta.pipe = 0;
        port_pipeline.apply();
        bit<32> pipe = (bit<32>)meta.pipe;
        bool ina_port = hdr.udp.isValid() && hdr.udp.dst_port == INA_UDP_PORT;
        // The job's slot region (step 4.1) for a RESULT as for a DATA: one apply site.
        bool region = false;
        if (hdr.ina.isValid() && standard_metadata.parser_error == error.NoError
                && hdr.ina.flags != FLAG_CONTROL) {
            meta.generation = hdr.ina.flow_id[15:14];
            if (job_slots.apply().hit) {
                region = true;
                hash(meta.slot, HashAlgorithm.identity, meta.slot_base, { hdr.ina.frag_id },
                     meta.slot_count);
                meta.cell = pipe * SLOTS_PER_PIPE + meta.slot;
            }
        }
        bool passing = false;   // the PS's RESULT on its way down (step 3)
        bool to_group = false;  // leaves down the task's result group (step 3)
        bool by_address = false;  // routed by its IPv4 destination (step 5)

        if (!hdr.packet_out.isValid()) {
            port_packets.count((bit<32>)standard_metadata.ingress_port);
        }
        if (hdr.packet_out.isValid()) {
            // Packet-out: the payload leaves unchanged out of the port the controller named.
            standard_metadata.egress_spec = (bit<9>)hdr.packet_out.egress_port;
            hdr.packet_out.setInvalid();
        } else if (standard_metadata.parser_error != error.NoError) {
            if (ina_port) {
                malformed.count(pipe);
            }
            mark_to_drop(standard_metadata);
        } else if (hdr.ethernet.isValid() && hdr.ethernet.ether_type == ETHERTYPE_LLDP) {
            // Link-discovery probe: to the controller with the port it came in on.
            hdr.packet_in.setValid();
            hdr.packet_in.ingress_port = (bit<16>)standard_metadata.ingress_port;
            standard_metadata.egress_spec = CPU_PORT;
        } else if (hdr.ina.isValid() && host_port.apply().hit && !host_job.apply().hit) {
            // A host sending for a job it is not part of (README step 2b).
            meta.job_cell = hdr.ina.job < MAX_JOBS ? (bit<32>)hdr.ina.job : 0;
            forged.count(meta.job_cell);
            mark_to_drop(standard_metadata);
        } else if (hdr.ina.isValid() && hdr.ina.flags == FLAG_RESULT) {
            passing = true;
            to_group = true;
        } else if (hdr.ina.isValid() && hdr.ina.flags != FLAG_CONTROL) {
            meta.verdict = V_PASS;
            // A short packet (ACK, PROBE) gets room for the elements the slot's action may
            // write: a loss query's repair leaves as a sum, its answer as a result.
            bool short = !hdr.ina_data.isValid();
            if (short) {
                hdr.ina_data.setValid();
                hdr.ina_data.elems0 = 0;
                hdr.ina_data.elems1 = 0;
            }
            if (region) {
                ina_aggregate.apply();
            }
            if (meta.verdict == V_RESULT) {
                hdr.ina.k = K;
                hdr.udp.length = INA_UDP_LEN;
                hdr.ipv4.total_len = 20 + INA_UDP_LEN;
            } else if (short) {
                hdr.ina_data.setInvalid();
            }
            if (meta.verdict == V_COLLIDE || meta.verdict == V_NACK
                    || meta.verdict == V_HELD) {
                if (meta.verdict == V_COLLIDE) {
                    collisions.count(pipe);
                }
                clone_preserving_field_list(CloneType.I2E,
                                            (bit<32>)standard_metadata.ingress_port, FL_CONTROL);
                mark_to_drop(standard_metadata);
                if (meta.naming == 1) {
                    // bmv2 replicates a packet with a group whatever its egress_spec, and
                    // each replica keeps the user metadata.
                    standard_metadata.mcast_grp = meta.name_group;
                }
            } else if (meta.verdict == V_DUP) {
                duplicates.count(pipe);
                mark_to_drop(standard_metadata);
            } else if (meta.verdict == V_PARTIAL || meta.verdict == V_QUIET) {
                mark_to_drop(standard_metadata);
            } else if (meta.verdict == V_RESULT) {
                // The kept RESULT again, from the PS (the asker's destination) to every worker.
                if (hdr.ina.flags == FLAG_DATA) {
                    duplicates.count(pipe);
                }
                hdr.ina.flags = FLAG_RESULT;
                hdr.ina.flow_id = meta.out_flow;
                hdr.udp.src_port = meta.out_flow;
                hdr.udp.checksum = 0;
                hdr.ina.next_node = meta.next_node;
                hdr.ina.aux = AUX_RETRANSMITTED;
                hdr.ethernet.src_addr = hdr.ethernet.dst_addr;
                hdr.ethernet.dst_addr = 0xffffffffffff;
                hdr.ipv4.src_addr = hdr.ipv4.dst_addr;
                hdr.ipv4.dst_addr = 0xffffffff;
                to_group = true;
            } else {
                if (meta.verdict == V_DONE) {
                    aggregations_completed.count(pipe);
                } else if (meta.verdict == V_AGAIN) {
                    duplicates.count(pipe);
                }
                if (meta.verdict != V_PASS) {
                    // The UDP source port is the flow id on every INA packet (README).
                    hdr.ina.flow_id = meta.out_flow;
                    hdr.udp.src_port = meta.out_flow;
                    hdr.udp.checksum = 0;
                    hdr.ina.next_node = meta.next_node;
                }
                if (!ina_forward.apply().hit) {
                    unknown_job.count(pipe);
                    mark_to_drop(standard_metadata);
                }
            }
        } else if (hdr.ipv4.isValid()) {
            by_address = true;
        } else {
            mark_to_drop(standard_metadata);
        }
        if (to_group) {
            // A RESULT to one worker's address (the PS's answer to its PROBE) is routed as
            // a CONTROL; kept, as every RESULT, where the task has a group.
            bool one = hdr.ipv4.dst_addr != 0xffffffff;
            if (result_multicast.apply().hit) {
                if (passing && region) {
                    keep_result();
                }
            } else if (!one) {
                unknown_job.count(pipe);
                mark_to_drop(standard_metadata);
            }
            if (one) {
                standard_metadata.mcast_grp = 0;
                by_address = true;
            }
        }
        if (by_address && !ipv4_lpm.apply().hit) {
            mark_to_drop(standard_metadata);
        }
        if (hdr.ina.isValid()) {
            hdr.ina.flags = hdr.ina.flags | meta.congested;
        }
    }
}

// *** EGRESS
// Only the I2E clone is rewritten: it becomes the ECN-marked CONTROL packet naming the
// fragment (and, in aux, the fragment occupying the slot; for a loss query's answer, the
// queried fragment, with count 0 for a NACK and HELD for a held contribution) and goes back
// toward the sender.

// Every other INA packet but CONTROL is marked congested when it found at least the port's
// threshold of packets queued ahead of it (README "Congestion mark").

control InaEgress(inout headers_t hdr, inout metadata_t meta,
                  inout standard_metadata_t standard_metadata) {

    @name("mark_above")
    action mark_above(bit<19> depth) {
        meta.mark_depth = depth;
    }

    // The default: from half of the port's own queue, so a queue marks before it drops.
    @name("mark_from_queue")
    action mark_from_queue() {
        meta.mark_depth = BMV2_QUEUE_DEPTH / 2;
    }

    // The egress ports whose queue marks packets, and from what depth (README "Congestion mark").
    @name("mark_threshold")
    table mark_threshold {
        key = { standard_metadata.egress_port: exact @name("egress_port"); }
        actions = { mark_above; mark_from_queue; NoAction; }
        default_action = NoAction();
        size = 512;
    }

    @name("set_named_host")
    action set_named_host(bit<32> addr) {
        hdr.ipv4.dst_addr = addr;
    }

    // The host of each worker member a name group reaches, by the replica's rid (its member
    // bit): a worker behind a switch that does not aggregate its flow is reached through
    // that switch's `ipv4_lpm` (README "Loss query"). A miss leaves the broadcast address.
    @name("named_host")
    table named_host {
        key = {
            meta.name_group: exact @name("group");
            standard_metadata.egress_rid: exact @name("rid");
        }
        actions = { set_named_host; NoAction; }
        default_action = NoAction();
        size = 4096;
    }

    apply {
        if (meta.naming == 1) {
            // A replica of a naming query (README "Loss query"): an unsolicited NACK for the
            // member whose bit is the replica's rid, if it is missing.
            // (a shift takes at most 8 bits here; a member bit is below MAX_FAN_IN)
            if (((meta.missing >> (bit<8>)standard_metadata.egress_rid) & 1) == 0) {
                mark_to_drop(standard_metadata);
            }
            hdr.ina.flags = FLAG_CONTROL;
            hdr.ina.next_node = NAMED;
            hdr.ina.count = 0;
            hdr.ina.aux = hdr.ina.frag_id;
            // From the PS (the asker's destination) to the member's host, as a RESULT.
            hdr.ethernet.src_addr = hdr.ethernet.dst_addr;
            hdr.ethernet.dst_addr = 0xffffffffffff;
            hdr.ipv4.src_addr = hdr.ipv4.dst_addr;
            hdr.ipv4.dst_addr = 0xffffffff;
            named_host.apply();
            hdr.ipv4.ecn = 3;
            hdr.udp.checksum = 0;
        } else if (standard_metadata.instance_type != PKT_INSTANCE_TYPE_INGRESS_CLONE
                && hdr.ina.isValid() && (hdr.ina.flags & FLAG_KIND) != FLAG_CONTROL) {
            if (mark_threshold.apply().hit
                    && standard_metadata.enq_qdepth >= meta.mark_depth) {
                hdr.ina.flags = hdr.ina.flags | FLAG_CONGESTED;
            }
        } else if (standard_metadata.instance_type == PKT_INSTANCE_TYPE_INGRESS_CLONE
                && hdr.ina.isValid()) {
            hdr.ina.flags = FLAG_CONTROL;  // a short packet, as every CONTROL
            hdr.ina_data.setInvalid();
            hdr.ina.k = 0;
            hdr.udp.length = SHORT_UDP_LEN;
            hdr.ipv4.total_len = 20 + SHORT_UDP_LEN;
            hdr.ina.aux = meta.occupant;
            if (meta.answer == 1) {
                hdr.ina.count = meta.held == 1 ? HELD : 16w0;
            }
            bit<48> mac = hdr.ethernet.dst_addr;
            hdr.ethernet.dst_addr = hdr.ethernet.src_addr;
            hdr.ethernet.src_addr = mac;
            bit<32> ip = hdr.ipv4.dst_addr;
            hdr.ipv4.dst_addr = hdr.ipv4.src_addr;
            hdr.ipv4.src_addr = ip;
            hdr.ipv4.ecn = 3;
            hdr.udp.checksum = 0;
        }
    }
}

control InaComputeChecksum(inout headers_t hdr, inout metadata_t meta) {
    apply {
        update_checksum(
            hdr.ipv4.isValid(),
            { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.dscp, hdr.ipv4.ecn, hdr.ipv4.total_len,
              hdr.ipv4.identification, hdr.ipv4.flags, hdr.ipv4.frag_offset, hdr.ipv4.ttl,
              hdr.ipv4.protocol, hdr.ipv4.src_addr, hdr.ipv4.dst_addr },
            hdr.ipv4.hdr_checksum,
            HashAlgorithm.csum16);
    }
}

// *** DEPARSER

control InaDeparser(packet_out packet, in headers_t hdr) {
    apply {
        packet.emit(hdr.packet_in);
        packet.emit(hdr.ethernet);
        packet.emit(hdr.ipv4);
        packet.emit(hdr.udp);
        packet.emit(hdr.ina);
        packet.emit(hdr.ina_data);
    }
}

V1Switch(InaParser(), InaVerifyChecksum(), InaIngress(), InaEgress(), InaComputeChecksum(),
         InaDeparser()) main;
