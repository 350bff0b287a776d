/* Forwarding only: the baseline `ina bench target` runs on bmv2 beside ina.p4.
 *
 * The same frames as the aggregation benchmark enter on the two sender ports; one exact-match
 * table on the ingress port sends the first sender's to the receiver port and drops the
 * second's (one frame out per pair, as with aggregation), and nothing else happens: no INA
 * parsing, no registers, no clones. bmv2's fragments/s with this program against its
 * fragments/s with ina.p4 is what the aggregation itself costs.
 */
#include <core.p4>
#include <v1model.p4>

header ethernet_t {
    bit<48> dst_addr;
    bit<48> src_addr;
    bit<16> ether_type;
}

struct headers_t {
    ethernet_t ethernet;
}

struct metadata_t {}

parser ForwardParser(packet_in packet, out headers_t hdr, inout metadata_t meta,
                     inout standard_metadata_t standard_metadata) {
    state start {
        packet.extract(hdr.ethernet);
        transition accept;
    }
}

control NoChecksum(inout headers_t hdr, inout metadata_t meta) {
    apply { }
}

control ForwardIngress(inout headers_t hdr, inout metadata_t meta,
                       inout standard_metadata_t standard_metadata) {
    @name("forward") action forward(bit<9> port) {
        standard_metadata.egress_spec = port;
    }

    @name("drop") action drop() {
        mark_to_drop(standard_metadata);
    }

    @name("port_forward") table port_forward {
        key = { standard_metadata.ingress_port : exact @name("ingress_port"); }
        actions = { forward; drop; }
        default_action = drop();
        size = 64;
    }

    apply {
        port_forward.apply();
    }
}

control NoEgress(inout headers_t hdr, inout metadata_t meta,
                 inout standard_metadata_t standard_metadata) {
    apply { }
}

control ForwardDeparser(packet_out packet, in headers_t hdr) {
    apply { packet.emit(hdr.ethernet); }
}

V1Switch(ForwardParser(), NoChecksum(), ForwardIngress(), NoEgress(), NoChecksum(),
         ForwardDeparser()) main;
