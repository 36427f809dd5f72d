import './base.css';
import './usage.css';
