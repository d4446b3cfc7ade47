"""The settings dialog's pages of fields: one tab per section, one row per ``section.key`` field, each
with its hint and an error shown under it until a person changes the field.

Every field's widget is named after its field (``objectName`` ``"sampling.max_frames"``) and its
error after the field with ``.error``, so the rows can be found as Qt finds any named child.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import (
    QAbstractSpinBox,
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QFrame,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QScrollArea,
    QSizePolicy,
    QSpinBox,
    QStyle,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from framewise.core.errors import SettingsError

INT_MAX = 2**31 - 1


class FieldError(QWidget):
    """A warning icon and message shown under a field; hidden while the field is fine."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        size = self.fontMetrics().height()
        self.icon = QLabel()
        self.icon.setPixmap(self.style().standardIcon(QStyle.StandardPixmap.SP_MessageBoxWarning).pixmap(size, size))
        self.label = QLabel()
        self.label.setWordWrap(True)
        font = self.label.font()
        font.setBold(True)
        self.label.setFont(font)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.icon, 0, Qt.AlignmentFlag.AlignTop)
        layout.addWidget(self.label, 1)
        self.hide()

    def show_message(self, message: str) -> None:
        self.label.setText(message)
        self.show()

    def clear(self) -> None:
        self.label.clear()
        self.hide()


class FieldTabs(QTabWidget):
    """The tabs of fields. :meth:`add_tab` starts a page, :meth:`add_field` adds a row to it;
    :meth:`fill` and :meth:`read` carry values in ``AppSettings.to_dict()``'s form."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._fields: dict[str, QWidget] = {}
        self._errors: dict[str, FieldError] = {}
        self._field_tabs: dict[str, int] = {}
        self._hints: dict[str, QLabel] = {}

    def add_tab(self, title: str) -> QFormLayout:
        page = QWidget()
        form = QFormLayout(page)
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.ExpandingFieldsGrow)
        form.setRowWrapPolicy(QFormLayout.RowWrapPolicy.DontWrapRows)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        scroll.setWidget(page)
        self.addTab(scroll, title)
        return form

    def add_field(self, form: QFormLayout, name: str, label: str, widget: QWidget, help_text: str = "") -> None:
        """Add a row holding ``widget`` above its (hidden) error; ``name`` is the settings field."""
        error = FieldError()
        error.setObjectName(f"{name}.error")
        widget.setObjectName(name)
        cell = QWidget()
        cell.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        column = QVBoxLayout(cell)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(2)
        if isinstance(widget, (QComboBox, QAbstractSpinBox)):
            column.addWidget(widget, 0, Qt.AlignmentFlag.AlignLeft)
        else:
            column.addWidget(widget)  # line edits, check boxes and composite fields take the row's width
        if help_text:
            self._hints[name] = dim_label(help_text)
            column.addWidget(self._hints[name])
        column.addWidget(error)
        for edited in _edited_signals(widget):
            edited.connect(error.clear)
        form.addRow(label, cell)
        self._fields[name] = widget
        self._errors[name] = error
        self._field_tabs[name] = self.count() - 1

    def field(self, name: str) -> Any:
        """The widget of field ``name`` (a spin box, combo box, check box, line edit or composite)."""
        return self._fields[name]

    def names(self) -> list[str]:
        return list(self._fields)

    def set_hint(self, name: str, text: str) -> None:
        self._hints[name].setText(text)

    def fill(self, data: dict[str, dict[str, Any]]) -> None:
        """Set every field named in ``data`` (``AppSettings.to_dict()``'s form); a composite field sets its own."""
        for section, values in data.items():
            for key, value in values.items():
                if f"{section}.{key}" in self._fields:
                    _set_value(self._fields[f"{section}.{key}"], value)

    def read(self, base: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """``base`` (``AppSettings.to_dict()``'s form) with every field's value in place of its own."""
        data = {section: dict(values) for section, values in base.items()}
        for name, widget in self._fields.items():
            section, key = name.split(".")
            data[section][key] = _get_value(widget)
        return data

    def show_error(self, error: SettingsError) -> bool:
        """Show ``error.message`` under the field it names, on its tab, and focus that field; False
        when it names no field here."""
        target = self._errors.get(error.field)
        if target is None:
            return False
        self.setCurrentIndex(self._field_tabs[error.field])
        target.show_message(error.message)
        self._fields[error.field].setFocus()
        return True

    def clear_error(self, name: str) -> None:
        self._errors[name].clear()

    def clear_errors(self) -> None:
        for error in self._errors.values():
            error.clear()


def combo(choices: tuple[str, ...]) -> QComboBox:
    widget = QComboBox()
    widget.addItems(list(choices))
    return widget


def spin(minimum: int, maximum: int, step: int) -> QSpinBox:
    widget = QSpinBox()
    widget.setRange(minimum, maximum)
    widget.setSingleStep(step)
    widget.setGroupSeparatorShown(True)
    widget.setCorrectionMode(QAbstractSpinBox.CorrectionMode.CorrectToNearestValue)
    return widget


def double_spin(minimum: float, maximum: float, decimals: int, step: float) -> QDoubleSpinBox:
    widget = QDoubleSpinBox()
    widget.setRange(minimum, maximum)
    widget.setDecimals(decimals)
    widget.setSingleStep(step)
    return widget


def dim_label(text: str = "") -> QLabel:
    """A wrapping label in the placeholder colour: a hint under a field or a choice."""
    label = QLabel(text)
    label.setWordWrap(True)
    label.setForegroundRole(QPalette.ColorRole.PlaceholderText)
    return label


def _edited_signals(widget: QWidget) -> list[Any]:
    """The signals by which a person changes ``widget``'s value (a composite field wires its own)."""
    if isinstance(widget, QLineEdit):
        return [widget.textEdited]
    if isinstance(widget, QComboBox):
        return [widget.activated]
    if isinstance(widget, QCheckBox):
        return [widget.clicked]
    if isinstance(widget, QAbstractSpinBox):
        return [widget.valueChanged]
    return []


def _set_value(widget: QWidget, value: Any) -> None:
    if isinstance(widget, QCheckBox):
        widget.setChecked(bool(value))
    elif isinstance(widget, QComboBox):
        widget.setCurrentText(str(value))
    elif isinstance(widget, QSpinBox):
        widget.setValue(int(value))
    elif isinstance(widget, QDoubleSpinBox):
        widget.setValue(float(value))
    elif isinstance(widget, QLineEdit):
        widget.setText(", ".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value))


def _get_value(widget: QWidget) -> Any:
    if isinstance(widget, QCheckBox):
        return widget.isChecked()
    if isinstance(widget, QComboBox):
        return widget.currentText()
    if isinstance(widget, (QSpinBox, QDoubleSpinBox)):
        return widget.value()
    if isinstance(widget, QLineEdit):
        return widget.text()
    return None
