"""Root's chmod and chown of a service's folders never go through a link the service's user could plant."""

from __future__ import annotations

import os
import pwd
import stat
from pathlib import Path

import pytest

from infra.errors import ServiceStartError
from infra.service_user import closed_parent, hand_over, private_folder


def test_a_private_folder_is_made_0700_and_a_link_in_its_place_is_refused_leaving_its_target_alone(
    tmp_path: Path,
) -> None:
    made = tmp_path / "data" / "bucket"
    private_folder(made)
    assert stat.S_IMODE(made.stat().st_mode) == 0o700
    made.chmod(0o755)
    private_folder(made)  # again, at the next start
    assert stat.S_IMODE(made.stat().st_mode) == 0o700

    target = tmp_path / "elsewhere"  # /etc, say
    target.mkdir(mode=0o755)
    target.chmod(0o755)
    planted = tmp_path / "data" / "planted"
    planted.symlink_to(target)
    with pytest.raises(ServiceStartError, match="planted is not a folder"):
        private_folder(planted)
    assert stat.S_IMODE(target.stat().st_mode) == 0o755


@pytest.mark.skipif(os.geteuid() != 0, reason="handing a folder over to another user takes root")
def test_hand_over_refuses_a_link_in_a_folders_place_and_hands_over_a_link_inside_as_itself(tmp_path: Path) -> None:
    nobody = pwd.getpwnam("nobody")
    target = tmp_path / "secret"
    target.write_text("root's")
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "inside").symlink_to(target)
    hand_over("nobody", folder)
    assert folder.stat().st_uid == nobody.pw_uid
    assert (folder / "inside").lstat().st_uid == nobody.pw_uid
    assert target.stat().st_uid == 0, "what the link inside points to stays root's"
    swapped = tmp_path / "swapped"
    swapped.symlink_to(target)
    with pytest.raises(ServiceStartError, match="is a symbolic link"):
        hand_over("nobody", swapped)
    assert target.stat().st_uid == 0


def test_the_first_folder_other_users_cannot_enter_is_named(open_tmp: Path) -> None:
    closed = open_tmp / "closed"
    closed.mkdir(mode=0o700)
    (closed / "home" / "lib").mkdir(parents=True, mode=0o755)
    (open_tmp / "open" / "home").mkdir(parents=True, mode=0o755)
    assert closed_parent(closed / "home" / "lib") == closed
    assert closed_parent(open_tmp / "open" / "home") is None
