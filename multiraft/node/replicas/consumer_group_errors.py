"""The node's boundary between the coordinator's refusals (:mod:`multiraft.consumer_groups.errors`) and the client
face (:mod:`multiraft.errors`): one class for each Kafka reason, the same ``reason`` on both sides."""

from __future__ import annotations

from multiraft import consumer_groups as groups
from multiraft import errors as face

__all__ = ["client_error"]

_FACE: dict[type[groups.GroupCoordinatorError], type[face.MultiraftError]] = {
    groups.UnknownMemberIdError: face.UnknownMemberError,
    groups.IllegalGenerationError: face.StaleGenerationError,
    groups.FencedInstanceIdError: face.InstanceFencedError,
    groups.PartitionNotOwnedError: face.PartitionNotAssignedError,
    groups.GroupFencedError: face.MemberFencedError,
    groups.RebalanceInProgressError: face.GroupRebalancingError,
    groups.MemberIdRequiredError: face.MemberIdAssignedError,
    groups.InconsistentGroupProtocolError: face.GroupProtocolMismatchError,
    groups.InvalidSessionTimeoutError: face.SessionTimeoutOutOfRangeError,
    groups.GroupMaxSizeReachedError: face.GroupFullError,
    groups.IllegalAssignmentError: face.InvalidGroupAssignmentError,
    groups.NonEmptyGroupError: face.GroupNotEmptyError,
    groups.GroupDeadError: face.CoordinatorMovedError,
    groups.GroupSettingsError: face.InvalidArgumentError,
    groups.UnknownAssignorError: face.InvalidArgumentError,
}


def client_error(exc: groups.GroupCoordinatorError) -> face.MultiraftError:
    """The client-face error of a coordinator refusal, caused by it (as ``raise ... from exc`` would)."""
    kind = next((_FACE[k] for k in type(exc).__mro__ if k in _FACE), face.MultiraftError)
    metadata: dict[str, object] = {}
    if isinstance(exc, groups.MemberIdRequiredError | groups.UnknownMemberIdError | groups.FencedInstanceIdError):
        metadata["member_id"] = exc.member_id
    if isinstance(exc, groups.IllegalGenerationError):
        metadata["generation"] = exc.current
    if isinstance(exc, groups.PartitionNotOwnedError):
        metadata["partitions"] = ",".join(f"{t}/{p}" for t, p in exc.partitions)
    error = kind(str(exc), **metadata)
    error.__cause__ = exc
    return error
