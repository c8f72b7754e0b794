// The Computers page's secret forms: the value is sealed here, in the browser, for the
// computer's pinned seal key (see seal.js); only {name, sealed} is posted. No build step.
import { sealSecret, SealKeyMismatch } from '/assets/seal.js';

const csrfToken = () => document.querySelector('meta[name="csrf-token"]')?.content || '';
const NAME = /^[A-Za-z_][A-Za-z0-9_]{0,63}$/;

for (const form of document.querySelectorAll('form[data-seal-device]')) {
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const error = form.querySelector('.error');
    const status = form.querySelector('.status');
    error.textContent = '';
    status.textContent = '';
    const deviceId = form.dataset.sealDevice;
    const name = form.elements.name.value.trim();
    const valueField = form.elements.value;
    if (!NAME.test(name)) {
      error.textContent = 'A name is letters, digits and _, not starting with a digit (at most 64).';
      return;
    }
    const button = form.querySelector('button');
    button.disabled = true;
    try {
      const sealKey = JSON.parse(form.dataset.sealKey);
      const sealed = await sealSecret({ deviceId, sealKey, name, value: valueField.value, decision: null });
      valueField.value = '';
      const response = await fetch(`/api/devices/${encodeURIComponent(deviceId)}/secrets`, {
        method: 'POST',
        credentials: 'same-origin',
        headers: { 'content-type': 'application/json', 'x-tether-csrf': csrfToken() },
        body: JSON.stringify({ name, sealed }),
      });
      const text = await response.text();
      const data = text ? JSON.parse(text) : null;
      if (!response.ok) throw new Error(data?.error?.message || `The server answered ${response.status}.`);
      status.textContent = `Sent ${name}, sealed for this computer; it is saved when the computer takes it.`;
      form.elements.name.value = '';
    } catch (err) {
      error.textContent = err instanceof SealKeyMismatch
        ? 'This computer\'s seal key does not hold together; nothing was sent. Pair it again.'
        : err.message;
    } finally {
      button.disabled = false;
    }
  });
}
