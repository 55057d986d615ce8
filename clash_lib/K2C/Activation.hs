{-# LANGUAGE DataKinds, KindSignatures, NoImplicitPrelude, ScopedTypeVariables,
             TypeApplications, TypeOperators, FlexibleContexts, NoStarIsType, ConstraintKinds, TypeFamilies #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver #-}
{-|
Per-neuron output stages (contract steps 4 to 6): requantization of the exact
accumulator to the layer's output format, the activation functions, and the
predicted class.
-}
module K2C.Activation
  ( Finish (..)
  , TableRegs
  , requantize
  , linear
  , relu
  , argmax
  ) where

import Clash.Prelude

-- | A compute layer's last two steps on each neuron's exact accumulator
-- (contract steps 4 and 5): requantize it to the output format, then activate
-- the requantized value. Two functions, not their composition, so that the
-- pipelined engine ("K2C.Engine") registers each on its own: a saturating
-- rounding's carry chain and an activation's comparisons are never one path
-- (together they would be mobilenet_digits' critical path on ECP5, 48 logic levels).
--
-- @t@ ('TableRegs'): registers after the activated one, 2 when the activation
-- reads a table ("K2C.Lut"). The activated register is then the block RAM's
-- synchronous read, whose data leaves the block 5.6 ns after the clock on
-- ECP5 without its output register; the first extra register becomes that
-- output register (REGMODE=OUTREG, keras2clash's fpga/bramregs.py), so the
-- route from the block RAM starts from a fast flip-flop (mlp_tanh on ECP5:
-- 5.6 + 7.0 ns route + multiplexer, 13.8 ns). The second is a fabric register
-- the placer puts between the block RAM's row and the engine's result
-- register, which can be far apart: with the tables in one row of block RAMs
-- and the result register beside the multipliers, that one route would be
-- mlp_tanh's critical path (10.2 ns, OUTREG -> result register).
-- 0 for every other activation.
data Finish (t :: Nat) acc o = Finish (acc -> o) (o -> o)

-- | What an engine needs of a finish's extra registers @t@: known, 0 to 2.
type TableRegs t = (KnownNat t, t <= 2)

-- | Contract step 4: round to nearest with ties toward +infinity, then
-- saturate.
--
-- 'resizeF' drops fraction bits by flooring and saturates the integer part,
-- so adding half an output LSB first turns its floor into round-half-up.
-- The addition is done one integer bit wider so it cannot wrap whatever the
-- accumulator holds. When the output has at least as many fraction bits
-- (@cf <= fo@) nothing is rounded: the fraction is widened first (exact) and
-- the integer part narrowed (saturated) second, because Clash 1.6.4's
-- 'resizeF' wraps instead of saturating in some conversions that grow the
-- fraction while shrinking the integer part (e.g. @SFixed 6 2 -> SFixed 3 5@).
requantize
  :: forall ci cf oi fo
   . (KnownNat ci, KnownNat cf, KnownNat oi, KnownNat fo)
  => SFixed ci cf -> SFixed oi fo
requantize acc
  | dropped > 0 = resizeF (sf (SNat @cf) (resize (unSF acc) + halfLsb) :: SFixed (ci + 1) cf)
  | otherwise   = resizeF (resizeF acc :: SFixed ci fo)
  where
    dropped = natToInteger @cf - natToInteger @fo
    halfLsb = bit (fromInteger dropped - 1)

-- | The identity activation (also used for softmax on the output layer: the
-- argmax does not change, and the scores are the requantized logits).
linear :: SFixed oi fo -> SFixed oi fo
linear = id

-- | @max(r, 0)@, exact.
relu :: (KnownNat oi, KnownNat fo) => SFixed oi fo -> SFixed oi fo
relu = max 0

-- | The index of the largest element; ties go to the lowest index. A balanced
-- tree of comparisons that keeps the left (lower-index) candidate unless the
-- right one is strictly larger.
argmax :: forall n a . (KnownNat n, Ord a) => Vec (n + 1) a -> Index (n + 1)
argmax = fst . fold pick . zip indicesI
  where
    pick left@(_, x) right@(_, y) = if y > x then right else left
