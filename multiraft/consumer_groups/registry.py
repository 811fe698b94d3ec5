"""The replicated side of the groups of one ``__consumer_offsets`` partition: the last record of each group.

Every replica of the partition applies the group records it commits (:meth:`GroupRecords.apply`) beside the
offset commits; only the leader runs coordinators. When a replica becomes leader it builds one from each
group's last record (:meth:`GroupRecords.coordinator`); when it loses leadership the driver unloads them.
A snapshot of the partition carries :meth:`GroupRecords.records` (encoded with :mod:`.records`), so a
restarted replica rebuilds the same map.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from ._model import GroupMetadataRecord, GroupRecord, GroupSettings, GroupTombstone
from .coordinator import GroupCoordinator, MemberIdFactory

__all__ = ["GroupRecords"]


@dataclass
class GroupRecords:
    """group id -> its last metadata record; a tombstone removes the group."""

    groups: dict[str, GroupMetadataRecord] = field(default_factory=dict)

    def apply(self, record: GroupRecord) -> None:
        if isinstance(record, GroupTombstone):
            self.groups.pop(record.group_id, None)
        else:
            self.groups[record.group_id] = record

    def load(self, records: Iterable[GroupRecord]) -> None:
        """Replace the map with a snapshot's records."""
        self.groups = {}
        for record in records:
            self.apply(record)

    def records(self) -> list[GroupMetadataRecord]:
        """The records a snapshot must hold, in a stable order."""
        return [self.groups[name] for name in sorted(self.groups)]

    def coordinator(
        self, group_id: str, new_member_id: MemberIdFactory, now_ms: int, settings: GroupSettings | None = None
    ) -> GroupCoordinator:
        """The group's coordinator on a new leader: rebuilt from its last record, or a new, empty group."""
        record = self.groups.get(group_id)
        rebuilt = GroupCoordinator.from_records(group_id, [record] if record else [], new_member_id, now_ms, settings)
        return rebuilt or GroupCoordinator(group_id, new_member_id, settings or GroupSettings())
