"""The OpenFlow 1.3 messages that put one plan version's `SwitchTables` on a connected switch
(os-ken datapath) and take them off again. Every rule carries its plan version as cookie, so a
version is deleted by cookie."""

from __future__ import annotations

from controller.southbound.openflow.rules import FlowRule, SwitchTables

COOKIE_MASK = (1 << 64) - 1  # a rule's cookie is its plan version, matched exactly


def wipe(dp) -> None:
    """Delete every flow and group the switch holds."""
    ofp, parser = dp.ofproto, dp.ofproto_parser
    dp.send_msg(
        parser.OFPFlowMod(
            dp,
            table_id=ofp.OFPTT_ALL,
            command=ofp.OFPFC_DELETE,
            out_port=ofp.OFPP_ANY,
            out_group=ofp.OFPG_ANY,
        )
    )
    dp.send_msg(parser.OFPGroupMod(dp, command=ofp.OFPGC_DELETE, group_id=ofp.OFPG_ALL))


def send_tables(dp, tables: SwitchTables, version: int) -> None:
    """Add one version's groups, then its rules, which carry the version as cookie."""
    ofp, parser = dp.ofproto, dp.ofproto_parser
    for group in tables.groups:
        buckets = [parser.OFPBucket(actions=[parser.OFPActionOutput(p)]) for p in group.ports]
        dp.send_msg(
            parser.OFPGroupMod(
                dp,
                command=ofp.OFPGC_ADD,
                type_=ofp.OFPGT_ALL,
                group_id=group.group_id,
                buckets=buckets,
            )
        )
    for rule in tables.flows:
        dp.send_msg(
            parser.OFPFlowMod(
                dp,
                cookie=version,
                table_id=rule.table,
                priority=rule.priority,
                command=ofp.OFPFC_ADD,
                match=parser.OFPMatch(**rule.match),
                instructions=_instructions(rule, dp),
            )
        )


def delete_version(dp, tables: SwitchTables, version: int) -> None:
    """Delete the rules whose cookie is `version`, then the version's groups."""
    ofp, parser = dp.ofproto, dp.ofproto_parser
    dp.send_msg(
        parser.OFPFlowMod(
            dp,
            cookie=version,
            cookie_mask=COOKIE_MASK,
            table_id=ofp.OFPTT_ALL,
            command=ofp.OFPFC_DELETE,
            out_port=ofp.OFPP_ANY,
            out_group=ofp.OFPG_ANY,
        )
    )
    for group in tables.groups:
        dp.send_msg(parser.OFPGroupMod(dp, command=ofp.OFPGC_DELETE, group_id=group.group_id))


def send_barrier(dp) -> int:
    """Send a barrier request; returns its xid, which the reply carries."""
    barrier = dp.ofproto_parser.OFPBarrierRequest(dp)
    xid = dp.set_xid(barrier)
    dp.send_msg(barrier)
    return xid


def _instructions(rule: FlowRule, dp) -> list:
    ofp, parser = dp.ofproto, dp.ofproto_parser
    if rule.goto_table is not None:
        return [parser.OFPInstructionGotoTable(rule.goto_table)]
    if rule.output is not None:
        actions = [parser.OFPActionOutput(rule.output)]
    elif rule.group is not None:
        actions = [parser.OFPActionGroup(rule.group)]
    else:
        return []  # no instruction: drop
    return [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions)]
