"""``pool:`` in a job spec: optional (the service picks one), a pool name when given, kept in the normalized form."""

from __future__ import annotations

import pytest

from aicenter.core.errors import ValidationFailed
from aicenter.core.jobs import parse_job_spec

DOC = {"name": "j", "tasks": [{"resources": {"cpu": 1, "memory": "1Gi"}, "command": "true"}]}


def test_a_spec_may_name_its_pool_and_keeps_it_when_normalized() -> None:
    spec = parse_job_spec({**DOC, "pool": "a100"})
    assert spec.pool == "a100"
    assert parse_job_spec(spec.normalized()) == spec
    assert parse_job_spec(DOC).pool is None
    assert "pool" not in parse_job_spec(DOC).normalized()  # no pool named: the service decides at submit


@pytest.mark.parametrize("bad", ["A100 pool", "", 7])
def test_a_pool_that_is_not_a_name_is_refused_naming_the_field(bad: object) -> None:
    with pytest.raises(ValidationFailed) as caught:
        parse_job_spec({**DOC, "pool": bad})
    assert caught.value.details["field"] == "pool"
